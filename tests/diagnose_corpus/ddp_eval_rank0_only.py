"""Final evaluation on rank 0 only, through the DDP wrapper: DDP's forward is a collective.

Source: https://github.com/FareedKhan-dev/train-llm-from-scratch/pull/32
Cause: after training, the evaluation runs only on rank 0 (`if is_main:`) but calls the DDP-wrapped model's forward,
    which broadcasts buffers to the other ranks; they have already left, so rank 0 waits (NCCL: until its watchdog
    aborts). The fix: evaluate on the unwrapped model (model.module).
Changed: gloo on CPU, a BatchNorm model (buffers to broadcast), two ranks by fork, three training steps.
Expect: model.module
Timeout: torch 8
"""

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def run(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = DDP(nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(16, 8)).sum().backward()
        opt.step()
    if rank == 0:  # final evaluation on the main rank only
        model.eval()
        with torch.no_grad():
            print("eval loss", model(torch.randn(16, 8)).pow(2).mean().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    mp.start_processes(run, args=(port,), nprocs=2, start_method="fork")
