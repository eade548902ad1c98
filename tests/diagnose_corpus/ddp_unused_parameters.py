"""A reward head that never uses the backbone's LM head: DDP's reduction of the previous step never finished.

Source: https://github.com/FareedKhan-dev/train-llm-from-scratch/pull/32
Cause: "RewardModel uses the backbone's forward_hidden + a scalar reward head and never its lm_head, so those params get
    no gradient and DDP (default find_unused_parameters=False) errors" at the next iteration ("Expected to have
    finished reduction in the prior iteration"); the fix passes find_unused_parameters=True.
Changed: a two-layer model on CPU, gloo, two ranks by fork.
Expect: Expected to have finished reduction && find_unused_parameters
Timeout: torch 6
"""

import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class RewardModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(8, 8)
        self.lm_head = nn.Linear(8, 100)  # not used for the reward
        self.reward = nn.Linear(8, 1)

    def forward(self, x):
        return self.reward(torch.relu(self.hidden(x)))


def run(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = DDP(RewardModel())
    for _ in range(2):
        model(torch.randn(4, 8)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    mp.start_processes(run, args=(port,), nprocs=2, start_method="fork")
