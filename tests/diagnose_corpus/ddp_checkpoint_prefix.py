"""A checkpoint saved from the DDP wrapper, loaded into the bare model.

Source: https://github.com/aks2203/deep-thinking/issues/5
Cause: "Missing key(s) in state_dict: "projection.0.weight" ... Unexpected key(s) in state_dict:
    "module.projection.0.weight"": the model was saved while wrapped (keys start with "module."); the fix strips the
    prefix or saves model.module.state_dict().
Changed: a two-layer model, a one-rank gloo group, an in-memory checkpoint.
Expect: Unexpected key && model.module
Timeout: torch 7
"""

import io
import os
import socket

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def make():
    return nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 1))


if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(probe.getsockname()[1]))
    probe.close()
    dist.init_process_group("gloo", rank=0, world_size=1)
    buffer = io.BytesIO()
    torch.save(DDP(make()).state_dict(), buffer)
    buffer.seek(0)
    dist.destroy_process_group()
    make().load_state_dict(torch.load(buffer))
