"""A DistributedSampler built in a run that never initialised a process group.

Source: https://github.com/bosung/MTL-KGC/issues/1
Cause: "Default process group has not been initialized, please make sure to call init_process_group": the script was
    started with plain python, not torch.distributed.launch/torchrun, so nothing called init_process_group before
    DistributedSampler asked for the world size (the maintainer: launch it with -m torch.distributed.launch).
Changed: a tensor dataset instead of the knowledge-graph one.
Expect: Default process group has not been initialized && init_process_group
Timeout: 60
"""

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dataset = TensorDataset(torch.arange(10.0))
loader = DataLoader(dataset, sampler=DistributedSampler(dataset), batch_size=2)
print(sum(len(b[0]) for b in loader))
