"""Many small tensors from DataLoader workers kept in a list: "Too many open files".

Source: https://github.com/pytorch/pytorch/issues/11201
Cause: under the file_descriptor sharing strategy every tensor a worker sends is a shared-memory file kept open
    while the tensor lives; keeping them all in a list exhausts the open-file limit. The fix: keep plain numbers,
    raise `ulimit -n`, or torch.multiprocessing.set_sharing_strategy("file_system").
Changed: the open-file limit lowered to 256 (resource.setrlimit) so that it fails within seconds, and the dataset
    cut to 5000 items.
Expect: too many open files && file_system && 02_shared_tensors, section 4
Timeout: 60
"""

import resource

import torch
from torch.utils.data import DataLoader, Dataset


class TestSet(Dataset):
    def __len__(self):
        return 5000

    def __getitem__(self, index):
        return {"index": index}


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    index = []
    for sample in DataLoader(dataset=TestSet(), batch_size=1, num_workers=1):
        index.append(sample["index"])
    print(len(index), torch.cat(index).sum())
