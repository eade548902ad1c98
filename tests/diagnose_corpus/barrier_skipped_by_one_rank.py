"""One rank skips a barrier(): its one barrier pairs with the others' first; the rest wait in their second.

Source: https://github.com/pytorch/pytorch/issues/138322
Cause: `if rank != 3: barrier()` then `barrier()`: collectives pair up by their order in each rank, not by the line
    that calls them, so rank 3's one barrier completes the others' first; rank 3 (and others) finish, and rank 0
    waits in its second barrier for ranks that never call it (the question's own output; the part of the thread
    stored here has no maintainer's answer, this is the usual reading).
Changed: two ranks forked by torch.multiprocessing.start_processes instead of four under torchrun; gloo on 127.0.0.1
    instead of nccl; rank 1 is the one that skips. On gloo rank 0 does not wait for the timeout: when rank 1 exits,
    its barrier fails at once with "Connection reset by peer" (or "closed by peer").
Expect: out of step && rank 1 never reached collective #2 && barrier of []
Timeout: torch 4
"""

import datetime
import socket

import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, port: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(minutes=30)
    )
    if rank != 1:
        dist.barrier()
    dist.barrier()
    print(f"{rank} Done.")


if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    mp.start_processes(run, args=(port,), nprocs=2, start_method="fork")
