"""A DataLoader with workers inside a Pool task: daemonic processes are not allowed to have children.

Source: https://github.com/pytorch/pytorch/issues/15950
Cause: "When already using many workers of the main process, calling a dataloader iterator with sub-workers will cause:
    AssertionError: daemonic processes are not allowed to have children"; the maintainer: either not set the
    subprocess as daemonic or use num_workers=0.
Changed: a tensor dataset; the outer workers are a multiprocessing Pool.
Expect: daemonic processes are not allowed to have children && num_workers=0
Timeout: torch 3
"""

from multiprocessing import Pool

import torch
from torch.utils.data import DataLoader, TensorDataset


def evaluate(shard: int) -> float:
    loader = DataLoader(TensorDataset(torch.arange(8.0) + shard), batch_size=4, num_workers=2)
    return sum(b[0].sum().item() for b in loader)


if __name__ == "__main__":
    with Pool(2) as pool:
        print(pool.map(evaluate, [0, 1]))
