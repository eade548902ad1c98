"""A dict of numpy arrays from each batch kept in a list: "received 0 items of ancdata" / too many open files.

Source: https://github.com/pytorch/pytorch/issues/41465
Cause: each batch's arrays are views of tensors shared by file descriptor; keeping them keeps the descriptors open
    until the limit (pytorch/pytorch#973); set_sharing_strategy("file_system"), or copy the arrays.
Changed: the open-file limit lowered to 256 so that it fails within seconds; 2 workers instead of 4; 500 batches.
Expect: too many open files && 02_shared_tensors, section 4
Timeout: 60
"""

import resource

import numpy as np
from torch.utils.data import DataLoader, Dataset


class MyDataset(Dataset):
    def __len__(self):
        return 500 * 64

    def __getitem__(self, idx):
        return {"d1": np.zeros((50, 2))}


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    dl = DataLoader(MyDataset(), batch_size=64, num_workers=2, shuffle=False)
    dt_1 = []
    for data in dl:
        dt_1.append(data["d1"].numpy())
