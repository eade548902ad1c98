"""Uneven inputs: one rank runs out of batches, exits, and the other fails in all_reduce.

Source: https://github.com/CGCL-codes/pFedSD/issues/3
Cause: the thread has no answer; its traceback shows a worker's dist.send failing with "Connection closed by peer"
    after its peer's process had gone: one rank ended (here normally, out of batches) while the other still called a
    collective. The fix: the same number of steps on every rank, or Join (05).
Changed: two ranks forked by torch.multiprocessing.start_processes on gloo, 127.0.0.1; rank 1 has 2 batches, rank 0
    has 3; all_reduce instead of send.
Expect: rank 0 failed in all_reduce() && exited normally && Join
Timeout: 60
"""

import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as tmp


def run(rank: int, port: int, fd: int) -> None:
    wait = datetime.timedelta(minutes=30)
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, wait, master_listen_fd=fd if rank == 0 else None)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=wait)
    for _ in range(3 if rank == 0 else 2):
        dist.all_reduce(torch.ones(10))


if __name__ == "__main__":
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    tmp.start_processes(run, args=(sock.getsockname()[1], sock.fileno()), nprocs=2, start_method="fork")
