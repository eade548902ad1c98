"""The store's port is already taken by another job on the same machine.

Source: https://github.com/meta-pytorch/torchtune/issues/392
Cause: two jobs on one machine use the same store port (29500 by default): the second fails with
    "DistNetworkError: The server socket has failed to listen on any local network address ... Address already in
    use"; the fix is another port for the second job (or a free one picked by the OS).
Changed: the first job is a plain listening socket in another program (a python -c process that outlives this
    script, as the other job does in the thread); gloo, one rank, 127.0.0.1 and a free port instead of 29500.
Expect: already in use && held now by pid
Timeout: torch 3
"""

import os
import socket
import subprocess
import sys

import torch.distributed as dist

OTHER_JOB = (
    "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); "
    "print('up', flush=True); time.sleep(30)"
)

if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_JOB, str(port)], stdout=subprocess.PIPE, start_new_session=True
    )
    other.stdout.readline()  # the other job listens now
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
