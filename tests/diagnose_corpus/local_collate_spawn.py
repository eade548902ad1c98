"""A collate_fn defined inside a function, with spawn workers.

Source: https://buglyst.com/learn/guides/python-multiprocessing-pickling-debug
Cause: spawn workers receive the DataLoader's functions by pickle, and pickle cannot serialise a function defined
    inside another function ("Can't pickle local object"); define it at module level.
Changed: spawn chosen explicitly (it is the default on macOS and Windows), random tensors.
Expect: cannot be pickled && DataLoader && module level
Timeout: 60
"""

import torch
from torch.utils.data import DataLoader, TensorDataset


def train() -> None:
    def collate(batch):
        return torch.stack([x for (x,) in batch])

    data = TensorDataset(torch.randn(16, 3))
    for batch in DataLoader(data, batch_size=4, num_workers=1, collate_fn=collate, multiprocessing_context="spawn"):
        print(batch.shape)


if __name__ == "__main__":
    train()
