"""torch.distributed.launch passes --local-rank, which the script's parser does not know: exit code 2 on every rank.

Source: https://github.com/skycrapers/TecoGAN-PyTorch/issues/31
Cause: "main.py: error: unrecognized arguments: --local-rank=0" on each rank, then the launcher's "failed (exitcode:
    2)": torch.distributed.launch (torch 2) passes --local-rank with a dash, the script defines --local_rank; the fix
    is to accept "--local-rank" (or use torchrun and LOCAL_RANK).
Changed: a script that only parses its arguments; 2 processes on CPU. Run as a learner would: python -m
    torch.distributed.launch --nproc-per-node 2 (the case runs itself under it).
Expect: unrecognized arguments && LOCAL_RANK
Timeout: torch 6
"""

import argparse
import os
import subprocess
import sys

if __name__ == "__main__":
    if "LOCAL_RANK" not in os.environ and "--local-rank=0" not in sys.argv:
        launcher = [sys.executable, "-m", "torch.distributed.launch", "--nproc-per-node", "2", "--master-port", "0"]
        sys.exit(subprocess.call(launcher + [__file__]))
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", default=-1, type=int, help="local gpu index")
    args = parser.parse_args()
    print("rank", args.local_rank)
