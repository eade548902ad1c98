"""Waiting for a rendezvous (06, section 6): rank 0 of 2 starts, rank 1 never does.

file:// rendezvous in the temporary folder, gloo pinned to the loopback interface: nothing listens
beyond 127.0.0.1."""

import datetime
import os
import tempfile

import torch.distributed as dist

if __name__ == "__main__":
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    path = os.path.join(tempfile.mkdtemp(), "rendezvous")
    dist.init_process_group(
        "gloo", init_method=f"file://{path}", rank=0, world_size=2, timeout=datetime.timedelta(minutes=30)
    )
