"""init_process_group with its default env:// under plain python.

Source: https://github.com/hzwer/ECCV2022-RIFE/issues/52
Cause: `torch.distributed.init_process_group(backend=..., world_size=4)` run with plain python: env:// reads RANK,
    MASTER_ADDR and MASTER_PORT from the environment, which only a launcher sets ("environment variable RANK expected,
    but not set" then "MASTER_ADDR"); the maintainer: run it with python -m torch.distributed.launch.
Changed: gloo instead of nccl, world_size 1.
Expect: expected, but not set && torchrun
Timeout: torch 3
"""

import torch.distributed as dist

dist.init_process_group(backend="gloo", world_size=1)
