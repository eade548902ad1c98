"""A training script without a main guard, with DataLoader workers under spawn.

Source: https://openillumi.com/en/en-pytorch-dataloader-worker-exited-windows-fix
Cause: "DataLoader worker exited unexpectedly" on Windows: the spawn worker imports the script, whose top level
    starts the loader again before the worker has finished bootstrapping; the worker dies with that RuntimeError.
    The fix is `if __name__ == "__main__":` (not num_workers=0, which the page settles for).
Changed: spawn chosen explicitly (Windows' only start method), random tensors, one worker.
Expect: missing main guard && DataLoader && !Pool
Timeout: 60
"""

import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(64, 3), torch.randint(0, 2, (64,)))
loader = DataLoader(data, batch_size=32, num_workers=1, multiprocessing_context="spawn")
for x, _y in loader:
    print(x.shape)
