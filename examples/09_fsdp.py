"""FSDP2 on CPU: each of 2 ranks holds half of the parameters, gradients and Adam state.

Run:  torchrun --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:0 examples/09_fsdp.py
(on GPUs: backend "nccl", init_device_mesh("cuda", ...), and the model and batches on each rank's device)
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def main() -> None:
    dist.init_process_group("gloo")  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = nn.Sequential(nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 32))
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)  # each layer its own unit: gathered just before it runs
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # created after fully_shard: Adam sees the shards

    data = torch.Generator().manual_seed(1)  # one fixed batch, the same on every rank
    x, y = torch.randn(16 * world, 32, generator=data), torch.randn(16 * world, 32, generator=data)
    x, y = x.chunk(world)[rank], y.chunk(world)[rank]  # each rank its own part of the batch
    for step in range(5):
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # gradients are reduce-scattered: each rank keeps the mean of its shard
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0:
            print(f"step {step}: loss on rank 0's part {loss.item():.4f}")

    held = sum(p.to_local().numel() for p in model.parameters())
    total = sum(p.numel() for p in model.parameters())
    print(f"rank {rank} holds {held:,} of {total:,} parameters")
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: loopback only
    main()
