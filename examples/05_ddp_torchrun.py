"""DDP in a project of your own: a minimal training script for torchrun, on CPU with gloo.

Run it on one machine with two processes (the checkpoint goes to CHECKPOINT, default model.pt):

    torchrun --standalone --nproc-per-node=2 examples/05_ddp_torchrun.py [CHECKPOINT]

torchrun starts the script once per process and sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, which `init_process_group` reads. On a GPU machine use the "nccl" backend, move the model to
`LOCAL_RANK`'s device and pass `device_ids=[local_rank]` to DDP; on CPU pass no `device_ids`. torchrun
sets OMP_NUM_THREADS=1 in each process when it starts several per machine and the variable is unset.
"""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_data(samples: int = 256) -> TensorDataset:
    """A small regression task; every rank builds the same data set, the sampler splits it."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 8, generator=generator)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def train(checkpoint: str, epochs: int = 3) -> None:
    rank = dist.get_rank()
    torch.manual_seed(0)  # DDP broadcasts rank 0's weights anyway; the same seed keeps runs reproducible
    model = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = make_data()
    sampler = DistributedSampler(data, shuffle=True, seed=0)  # each rank a different share of the data
    loader = DataLoader(data, batch_size=16, sampler=sampler)  # no shuffle=True here: the sampler shuffles
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # a new share and order every epoch, the same on every rank
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()  # DDP all-reduces and averages the gradients here
            optimizer.step()
            total += loss.item()
        if rank == 0:
            print(f"epoch {epoch}: mean loss on rank 0 {total / len(loader):.4f}", flush=True)
    if rank == 0:
        torch.save(model.module.state_dict(), checkpoint)  # one rank saves; .module: keys without "module."
    dist.barrier()  # nobody goes on (or reads the file) before it is written


def main() -> None:
    checkpoint = sys.argv[1] if len(sys.argv) > 1 else "model.pt"
    dist.init_process_group("gloo")  # env:// by default: reads what torchrun set
    try:
        train(checkpoint)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
