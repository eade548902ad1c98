"""Batches bigger than a container's /dev/shm: a DataLoader worker dies of a bus error.

Source: https://github.com/pytorch/pytorch/issues/5040
Cause: Docker's default /dev/shm is 64 MB; the workers' batches do not fit ("DataLoader worker ... is killed by
    signal: Bus error" or "No space left on device"); start the container with --shm-size or --ipc=host.
Changed: a private 16 MB /dev/shm (user and mount namespace) and 8 MB batches instead of images in Docker.
Expect: /dev/shm && 06_deadlocks_and_pitfalls, section 7
Wrap: shm
Timeout: 60
"""

import torch
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.zeros(3, 256, 256)  # 0.75 MB per sample


if __name__ == "__main__":
    for _batch in DataLoader(Images(), batch_size=12, num_workers=2):
        pass
