"""A batch of images of different sizes: default_collate cannot stack them (in a worker).

Source: https://github.com/Suanmd/TR-MISR/issues/7
Cause: "RuntimeError: Caught RuntimeError in DataLoader worker process 0 ... stack expects each tensor to be equal
    size, but got [24, 32, 32] at entry 0 and [24, 32, 64] at entry 1": the samples differ in shape (the maintainer:
    check the data size, or add code to the DataLoader for non-square images).
Changed: random tensors of two shapes; 2 workers.
Expect: DataLoader worker && stack expects each tensor to be equal size && collate_fn
Timeout: torch 3
"""

import torch
from torch.utils.data import DataLoader, Dataset


class Frames(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.zeros(24, 32, 64 if i % 2 else 32)


if __name__ == "__main__":
    for batch in DataLoader(Frames(), batch_size=4, num_workers=2):
        print(batch.shape)
