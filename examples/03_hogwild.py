"""Hogwild in a project of your own: several processes train one model in shared memory, without locks.

Run it as a script: `python examples/03_hogwild.py`. Each process has its own optimizer, seed and data
order and one torch thread; the parent shares the model first, starts the processes, joins them with a
timeout and checks their exit codes, then evaluates the model they trained together.
"""

from __future__ import annotations

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

PROCESSES = 2
STEPS = 1_000  # per process


def make_data(n: int = 8_000, features: int = 20, classes: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """A synthetic classification task: each class a cloud of points around its own centre."""
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(classes, features, generator=g)
    y = torch.randint(0, classes, (n,), generator=g)
    return centres[y] + torch.randn(n, features, generator=g), y


def train(rank: int, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    """One Hogwild process: its own seed, data order and optimizer; updates go straight into the shared model."""
    torch.set_num_threads(1)  # before any torch op: processes x threads must not exceed the cores
    torch.manual_seed(rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(STEPS):
        idx = torch.randint(0, len(y), (32,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # writes into the shared parameters, no lock


def main() -> None:
    x, y = make_data()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 4))
    model.share_memory()  # without it, forked processes would train private copies
    processes = [mp.Process(target=train, args=(rank, model, x, y)) for rank in range(PROCESSES)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=300)
    codes = [p.exitcode for p in processes]
    if codes != [0] * PROCESSES:
        for p in processes:
            if p.is_alive():
                p.terminate()
        raise RuntimeError(f"a training process failed or hung: exit codes {codes}")
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    print(f"{PROCESSES} processes x {STEPS} steps, training accuracy: {100 * accuracy:.1f} %")


if __name__ == "__main__":  # spawn and forkserver children import this file: start nothing on import
    main()
