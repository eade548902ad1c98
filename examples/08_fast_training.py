"""The capstone's job after its fixes (chapter 08), as a script to copy into your own project: DataLoader
workers that load ahead, kept across epochs, more of them than cores when each sample waits on I/O; bigger
batches with the learning rate scaled by the same factor; a log line every 50 steps; and the dataset's
own random generator rebuilt in each worker. It prints where the time went, as the chapter measured it.

    python 08_fast_training.py --samples 2048
"""

import argparse
import os
import struct
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, get_worker_info

FEATURES, CLASSES = 16, 4


class RecordDataset(Dataset):
    """Each sample: an I/O-like wait, a decode in pure Python, and a random augmentation."""

    def __init__(self, n: int = 512, wait: float = 0.0015, seed: int = 0) -> None:
        self.n, self.wait = n, wait
        self.prototypes = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(seed)) * 0.6
        self.rng = np.random.default_rng(seed)  # copied into every worker: rebuilt in reseed_augment

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(self.wait)  # the read
        rng = np.random.default_rng([0, index])
        label = int(rng.integers(CLASSES))
        values = self.prototypes[label].numpy() + rng.standard_normal(FEATURES)
        record = np.round(values * 1000).astype("<i2").tobytes()
        decoded = [v / 1000.0 for v in struct.unpack(f"<{FEATURES}h", record)]  # the decode, in Python
        shift = self.rng.standard_normal(FEATURES) * 0.2  # the augmentation
        return torch.tensor(decoded, dtype=torch.float32) + torch.from_numpy(shift).float(), label


def reseed_augment(worker_id: int) -> None:
    """worker_init_fn: each worker's copy of the dataset gets a generator of its own."""
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2048, help="the training budget, in samples")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.set_num_threads(1)  # the workers get the cores; measure this on your own job
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    dataset = RecordDataset()
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=2 * cores,  # each sample waits: more workers than cores keep the cores busy
        persistent_workers=True,  # start the workers once, not every epoch
        worker_init_fn=reseed_augment,
        generator=torch.Generator().manual_seed(0),  # reproducible shuffles and worker seeds
    )
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, CLASSES))
    # linear scaling rule: the rate for batches of 8 was 0.01; the batch grew by batch_size / 8
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * args.batch_size / 8)

    steps = args.samples // args.batch_size
    waited = 0.0
    started = time.perf_counter()
    step = 0
    while step < steps:
        batches = iter(loader)
        while step < steps:
            before = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                break  # the next epoch, with the same workers
            waited += time.perf_counter() - before
            loss = nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 50 == 0:  # a .item() and a log line cost the main process: not every step
                print(f"step {step}: loss {loss.item():.3f}", flush=True)
    seconds = time.perf_counter() - started
    del batches, loader  # stops the persistent workers

    held_out = RecordDataset(n=1024, wait=0.0)  # indices 512 and up were never trained on
    x, y = zip(*(held_out[i] for i in range(512, 1024)), strict=True)
    with torch.no_grad():
        accuracy = (model(torch.stack(x)).argmax(1) == torch.tensor(y)).float().mean().item() * 100
    print(f"{step * args.batch_size} samples in {seconds:.2f} s, waiting for data {waited / seconds:.0%} of it")
    print(f"accuracy on 512 held-out samples: {accuracy:.1f}%")


if __name__ == "__main__":  # required: spawn and forkserver workers import this file
    main()
