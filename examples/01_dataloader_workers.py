"""A DataLoader with worker processes, set up the way chapter 01 teaches.

Run it as `python examples/01_dataloader_workers.py`. The dataset is a class at module level, so that
workers started by spawn (macOS, Windows) can import it; its random "augmentation" comes from a generator
stored on the dataset, which `worker_init_fn` reseeds in every worker (otherwise each worker draws the same
numbers); the loader keeps its workers across epochs (`persistent_workers=True`) and gives up on a stalled
worker after `timeout` seconds.
"""

import os

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class NoisySquares(Dataset):
    """Sample i is i squared plus a little noise drawn from the dataset's own generator."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.rng = np.random.default_rng(0)  # copied into every worker: reseeded in seed_worker

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        noise = self.rng.normal(scale=0.01)
        return torch.tensor([index**2 + noise], dtype=torch.float32)


def seed_worker(worker_id: int) -> None:
    """worker_init_fn: give this worker's copy of the dataset its own generator. `info.seed` is drawn anew
    by the DataLoader each time workers start, and from its `generator=`, so runs are reproducible."""
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)
    try:  # NumPy's BLAS keeps its own threads; DataLoader caps only torch's
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    except ImportError:
        pass


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def main() -> None:
    loader = DataLoader(
        NoisySquares(16),
        batch_size=4,
        shuffle=True,
        num_workers=min(2, usable_cores()),
        worker_init_fn=seed_worker,
        generator=torch.Generator().manual_seed(0),  # reproducible shuffling and worker seeds
        persistent_workers=True,  # start the workers once, not every epoch
        timeout=60,  # seconds: a stalled worker raises instead of hanging the loop
    )
    for epoch in range(2):
        total = sum(float(batch.sum()) for batch in loader)
        print(f"epoch {epoch}: {len(loader)} batches, sum of samples {total:.2f}")


if __name__ == "__main__":
    main()
