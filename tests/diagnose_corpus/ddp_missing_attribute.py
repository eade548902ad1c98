"""An attribute of the model asked of the DDP wrapper.

Source: https://github.com/ultralytics/yolov5/issues/90
Cause: "AttributeError: 'DistributedDataParallel' object has no attribute 'model'": the code reads model.model[-1]
    after wrapping; the fix reads it through model.module.
Changed: a small module with a `model` attribute; a one-rank gloo group on CPU.
Expect: object has no attribute && model.module
Timeout: torch 6
"""

import os
import socket

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Detector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 3))

    def forward(self, x):
        return self.model(x)


if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(probe.getsockname()[1]))
    probe.close()
    dist.init_process_group("gloo", rank=0, world_size=1)
    model = DDP(Detector())
    print(model.model[-1].out_features)
