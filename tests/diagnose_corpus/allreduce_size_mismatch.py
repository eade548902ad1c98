"""all_reduce of tensors of different sizes on the two ranks: gloo aborts a rank.

Source: https://github.com/NVIDIA/nccl/issues/1394
Cause: the ranks pass tensors of different shapes to the same all_reduce; under gloo "terminate called after throwing
    an instance of 'gloo::EnforceNotMet' what(): [enforce fail at .../pair.cc:446] op.preamble.length <= op.nbytes";
    every rank must pass the same shape (one rank alone cannot reproduce it).
Changed: CPU tensors, gloo, two ranks by fork, 100 vs 200 rows of 8.
Expect: rank 0 raised gloo::EnforceNotMet && same shape
Timeout: torch 4
"""

import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    x = torch.ones(100 if rank == 0 else 200, 8)
    dist.all_reduce(x)
    print(rank, x.shape)


if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    mp.start_processes(run, args=(port,), nprocs=2, start_method="fork")
