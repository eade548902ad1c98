"""Ranks out of step: rank 0 waits in barrier() while rank 1 waits in all_reduce().

Source: https://github.com/Lightning-AI/pytorch-lightning/issues/19106
Cause: the ranks called different collectives (logging different keys on each rank made one rank run an extra
    broadcast/barrier), so each waits in its own collective for the other, forever (until the group's timeout).
Changed: two ranks forked by torch.multiprocessing.start_processes on gloo and a TCPStore on 127.0.0.1 (a socket we
    bind), a 30-minute group timeout (the hang must outlast the test's deadline, which the machine's load
    stretches); rank 0 calls barrier(), rank 1 all_reduce(), as the two sides of the thread did.
Expect: out of step && rank 0 in barrier() && rank 1 in all_reduce()
Timeout: torch 3.5
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
    if rank == 0:
        dist.barrier()
    else:
        dist.all_reduce(torch.ones(1_000))


if __name__ == "__main__":
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    tmp.start_processes(run, args=(sock.getsockname()[1], sock.fileno()), nprocs=2, start_method="fork")
