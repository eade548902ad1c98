"""init_process_group for 2 ranks, and only rank 0 is started.

Source: https://github.com/pytorch/pytorch/issues/49846
Cause: "do you have another process calling init_process_group with rank=1, so that these two processes can
    rendezvous?" (the maintainer): world_size=2 with one process waits for the missing rank forever.
Changed: gloo instead of nccl, a free port on 127.0.0.1 instead of 9129, a 30-minute timeout (the wait must
    outlast the test's deadline, which the machine's load stretches).
Expect: waiting for a store or rendezvous && rank(s) 1 of 2
Timeout: torch 3.5
"""

import datetime
import os
import socket

import torch.distributed as dist

if __name__ == "__main__":
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2, timeout=datetime.timedelta(minutes=30)
    )
