"""A DataLoader worker killed by SIGKILL (the out-of-memory killer).

Source: https://github.com/lyu-yx/ACUMEN/issues/4
Cause: the kernel's out-of-memory killer sent SIGKILL to a process of the job ("process 0 terminated with signal
    SIGKILL"); use fewer workers or smaller batches.
Changed: the worker sends itself SIGKILL in __getitem__ instead of exhausting this machine's memory; a DataLoader
    worker instead of a spawn rank.
Expect: DataLoader worker && SIGKILL && out-of-memory
Timeout: 60
"""

import os
import signal

import torch
from torch.utils.data import DataLoader, Dataset


class Huge(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        if i == 5:
            os.kill(os.getpid(), signal.SIGKILL)  # where the OOM killer would strike
        return torch.randn(4)


if __name__ == "__main__":
    for _batch in DataLoader(Huge(), batch_size=2, num_workers=1):
        pass
