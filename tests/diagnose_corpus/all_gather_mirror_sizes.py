"""all_gather with outputs sized for the other rank's tensor: both ranks raise, each naming the other's size.

Source: https://github.com/EchoseChen/SPA-VL-RLHF/issues/2
Cause: "different tensor shape on different ranks": the ranks contribute tensors of different shapes to the same
    collective ("Detected mismatch between collectives on ranks ... Tensor shapes: 33554432vs 38838272" under DETAIL);
    each rank's error is the mirror image of the other's, and both are the same cause.
Changed: gloo, two ranks by fork, all_gather of 4 vs 5 elements with outputs sized from rank 0's tensor.
Expect: invalid tensor size && rank 0 && rank 1
Timeout: torch 4
"""

import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    mine = torch.ones(4 + rank)
    outputs = [torch.zeros(4 + (1 - rank)) for _ in range(2)]  # sized as the other rank's
    dist.all_gather(outputs, mine)


if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    mp.start_processes(run, args=(port,), nprocs=2, start_method="fork")
