"""A small DDP training job to run with torchrun, as you would on real machines:

    torchrun --standalone --nproc-per-node=2 ddp_train.py OUTDIR [STEPS] [NODE]

torchrun starts the processes and sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT for each; `init_process_group("gloo")` reads them (the env:// default). Each rank trains on
its own batches and writes what it saw to OUTDIR/rank<RANK>.json instead of printing: the prints of several
processes interleave at random, a file per rank does not.

One line is a workaround, not a pattern: `exit_without_teardown()` at the end of `main`, which calls
`os._exit(0)` (see its docstring in `helpers/scripts/__init__.py`).
A real job ends the usual way, so that atexit handlers run and logs are flushed:

    def main():
        dist.init_process_group("gloo")
        try:
            train(...)
        finally:
            dist.destroy_process_group()

    if __name__ == "__main__":
        main()
"""

import faulthandler
import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.scripts import exit_without_teardown

SET_BY_TORCHRUN = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]


def listening(pid: int) -> list[str]:
    """Course check, not training: the addresses (no ports) on which process `pid` listens for TCP."""
    import psutil

    conns = psutil.Process(pid).net_connections(kind="tcp")
    return sorted({c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN})


def train(rank: int, world: int, steps: int) -> bool:
    """A few DDP steps on this rank's own data; True if all ranks end with identical parameters."""
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)  # each rank its own data
    for _ in range(steps):
        x = torch.randn(16, 4, generator=gen)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(everyone, flat)
    return all(torch.equal(everyone[0], other) for other in everyone)


def main() -> None:
    faulthandler.enable()  # a crash in native code (SIGABRT, SIGSEGV) then shows the Python stack
    outdir = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    node = sys.argv[3] if len(sys.argv) > 3 else "node0"
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo")  # env:// : everything comes from torchrun's variables
    rank, world = dist.get_rank(), dist.get_world_size()
    identical = train(rank, world, steps)
    result = {
        "RANK": rank,
        "WORLD_SIZE": world,
        "LOCAL_RANK": int(os.environ["LOCAL_RANK"]),
        "node": node,
        "set by torchrun": [name for name in SET_BY_TORCHRUN if name in os.environ],
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "--local-rank passed": any(arg.startswith("--local") for arg in sys.argv),
        "params identical on all ranks": identical,
        "torchrun agent listens on": listening(os.getppid()),  # its rendezvous store, while the job runs
        "agent pid": os.getppid(),  # c10d sorts its participants by (host name, agent pid, local id)
    }
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.barrier()  # every rank is done with the group before any rank closes its connections
    dist.destroy_process_group()
    exit_without_teardown()  # a workaround for torch 2.13, not a pattern: see its docstring


if __name__ == "__main__":
    main()
