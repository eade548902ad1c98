"""A full /dev/shm (06, section 7): run inside a private 64 MB tmpfs, batches of 80 MB."""

import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        return torch.zeros(1_000_000)  # 4 MB per sample


if __name__ == "__main__":
    for _ in DataLoader(Samples(), batch_size=20, num_workers=1, multiprocessing_context="fork"):
        pass
