"""A DataLoader worker's traceback (01, section 8): the dataset has a bug at index 3."""

import torch
from torch.utils.data import DataLoader


class Broken(torch.utils.data.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return {0: 0, 1: 1, 2: 2}[i]


if __name__ == "__main__":
    for _ in DataLoader(Broken(), batch_size=2, num_workers=1, multiprocessing_context="fork"):
        pass
