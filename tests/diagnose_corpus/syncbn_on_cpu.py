"""SyncBatchNorm in a model trained with DDP on CPU.

Source: https://github.com/QData/spacetimeformer/issues/90
Cause: "ValueError: SyncBatchNorm layers only work with GPU modules": with no GPU used, Lightning fell back to ddp on
    CPU, and DDP refuses a model with SyncBatchNorm layers on the CPU; the fix is plain BatchNorm on CPU.
Changed: a small model converted with convert_sync_batchnorm; a one-rank gloo group instead of Lightning.
Expect: SyncBatchNorm layers only work with GPU modules && BatchNorm
Timeout: torch 5
"""

import os
import socket

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(probe.getsockname()[1]))
    probe.close()
    dist.init_process_group("gloo", rank=0, world_size=1)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))
    DDP(model)
