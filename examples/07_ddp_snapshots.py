"""A plain DDP training script with what chapter 07 teaches, ready to copy into your own project:
gradient accumulation with `no_sync`, `DistributedSampler.set_epoch`, a learning rate scaled with the
global batch, and atomic snapshots on rank 0 that a restarted job resumes from.

Run it with two CPU processes (gloo), restarting the group once if a rank dies:

    torchrun --standalone --nproc-per-node=2 --max-restarts=1 07_ddp_snapshots.py --snapshot snap.pt
"""

import argparse
import contextlib
import datetime
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

ACCUMULATE = 4  # micro-batches per optimizer step
MICRO_BATCH = 16  # samples per micro-batch and rank
BASE_LR = 0.005  # the rate for one process's step of ACCUMULATE x MICRO_BATCH samples


def make_data(n: int = 1024) -> TensorDataset:
    """A regression problem, the same on every rank (the sampler splits it)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=gen)
    y = x @ torch.randn(16, 1, generator=gen) + 0.1 * torch.randn(n, 1, generator=gen)
    return TensorDataset(x, y)


def save_snapshot(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int) -> None:
    """Write to a temporary file, then rename: a crash mid-write leaves the previous snapshot whole."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
    torch.save(state, f"{path}.tmp")
    os.replace(f"{path}.tmp", path)


def load_snapshot(path: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore the model and the optimizer (its momentum too); return the epoch to continue with."""
    if not os.path.exists(path):
        return 0
    snapshot = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(snapshot["model"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return snapshot["epoch"] + 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--snapshot", default="snapshot.pt")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))  # minutes, not the default 30
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    # linear scaling rule: the global batch is world x ACCUMULATE x MICRO_BATCH, so the rate grows with world
    optimizer = torch.optim.SGD(model.parameters(), lr=BASE_LR * world, momentum=0.9)
    start = load_snapshot(args.snapshot, model, optimizer)  # every rank reads rank 0's last snapshot
    ddp = DDP(model)

    dataset = make_data()
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=MICRO_BATCH, sampler=sampler, drop_last=True)
    for epoch in range(start, args.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
        total = 0.0
        for i, (x, y) in enumerate(loader):
            step_ends = (i + 1) % ACCUMULATE == 0
            with contextlib.nullcontext() if step_ends else ddp.no_sync():  # all-reduce on the last only
                loss = nn.functional.mse_loss(ddp(x), y) / ACCUMULATE
                loss.backward()
            total += loss.item()
            if step_ends:
                optimizer.step()
                optimizer.zero_grad()
        if rank == 0:
            save_snapshot(args.snapshot, model, optimizer, epoch)
            print(f"epoch {epoch}: mean micro-batch loss {total * ACCUMULATE / len(loader):.4f}", flush=True)
        dist.barrier()  # nobody starts the next epoch before the snapshot exists
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
