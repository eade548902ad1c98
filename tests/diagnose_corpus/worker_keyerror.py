"""A KeyError inside a DataLoader worker.

Source: https://github.com/lufficc/SSD/issues/156
Cause: "caused because of unknown class name 'd00'" (the answer): the dataset's own lookup of a label that is not in
    its class names raised KeyError in a worker; DataLoader re-raises it in the main process as "Caught KeyError in
    DataLoader worker process 0" with the worker's traceback.
Changed: a dataset whose class-name table lacks one annotation's label; random tensors instead of images.
Expect: DataLoader worker 0 raised KeyError && __getitem__
Timeout: 60
"""

import torch
from torch.utils.data import DataLoader, Dataset

CLASS_NAMES = {"car": 0, "person": 1, "dog": 2}
ANNOTATIONS = ["car", "person", "dog", "car", "d00", "person"]


class Labelled(Dataset):
    def __len__(self) -> int:
        return len(ANNOTATIONS)

    def __getitem__(self, i: int):
        return torch.randn(3), CLASS_NAMES[ANNOTATIONS[i]]


if __name__ == "__main__":
    for _x, _y in DataLoader(Labelled(), batch_size=2, num_workers=1):
        pass
