"""Waiting in a collective (05, section 9): rank 0 enters a barrier that rank 1 never calls.

Two ranks forked by torch.multiprocessing.start_processes (what spawn uses), on a gloo group whose
store listens on 127.0.0.1 only (a socket bound by us, as helpers.pitfalls.loopback_store does)."""

import datetime
import os
import socket
import time

import torch.distributed as dist
import torch.multiprocessing as tmp


def run(rank: int, port: int, fd: int) -> None:
    wait = datetime.timedelta(minutes=30)  # outlasts any deadline the test gives
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", port, 2, True, wait, master_listen_fd=fd)
    else:
        store = dist.TCPStore("127.0.0.1", port, 2, False, wait)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=wait)
    if rank == 0:
        dist.barrier()  # rank 1 never comes
    else:
        time.sleep(1_800)  # "evaluating", and never reaching the barrier


if __name__ == "__main__":
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo would listen on the host name's address
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    tmp.start_processes(run, args=(port, sock.fileno()), nprocs=2, start_method="fork")
