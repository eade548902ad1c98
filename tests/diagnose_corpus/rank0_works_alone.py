"""Rank 0 evaluates alone while the other rank waits in a collective: the waiting rank times out.

Source: https://github.com/cfzd/Ultra-Fast-Lane-Detection-v2/issues/119
Cause: DDP training stuck at "Evaluating the results..." then "[Rank 3] Watchdog caught collective operation timeout:
    ... OpType=ALLREDUCE": rank 0 evaluates alone for longer than the group's timeout while the others wait in the
    next collective; the timeout is on the waiting ranks, the cause is rank 0's long solo work (raise the timeout,
    or evaluate on every rank).
Changed: gloo with a 2 s group timeout; rank 0's evaluation is a 5 s sleep; two ranks by fork.
Expect: rank 1 && rank 0 && !not a failure the course knows
Timeout: torch 5
"""

import datetime
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank: int, port: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=2)
    )
    if rank == 0:
        print("Evaluating the results...", flush=True)
        time.sleep(5)
    dist.all_reduce(torch.ones(1))
    dist.destroy_process_group()


if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    mp.start_processes(run, args=(port,), nprocs=2, start_method="fork")
