"""A DDP training job that survives a crash, to run with torchrun:

    torchrun --standalone --nproc-per-node=2 --max-restarts=1 resumable_train.py OUTDIR EPOCHS
             [--kill RANK,EPOCH,STEP] [--fail RANK,EPOCH] [--preempt RANK,EPOCH,STEP] [--snapshots DIR]

Every epoch rank 0 writes a snapshot (model, optimizer, epoch) atomically; every attempt starts from the
latest snapshot. torchrun restarts the *whole* group when one worker dies, and tells each attempt its
number in TORCHELASTIC_RESTART_COUNT. Each attempt meets in a store of its own: a `PrefixStore` named
after that number, over the store torchrun's agent shares with every attempt (pytorch/pytorch#135712:
without the prefix a restarted rank can read the dead attempt's addresses and fail or hang).

`--kill`: that rank kills itself with SIGKILL (what the out-of-memory killer sends) at that step of the
first attempt. `--fail`: that rank raises; `@record` writes its traceback to the error file torchrun reads.

SIGTERM (a scheduler's preemption, or torchrun's agent stopping its workers): every rank only records
it in its handler; before each step the ranks all-reduce that flag, so all stop at the same step, and
rank 0 writes a snapshot of that step (mid-epoch) before they exit, well within the grace period the
agent gives before its SIGKILL (`--shutdown-timeout`, 30 s by default). `--preempt`: that rank plays
the scheduler and sends SIGTERM to torchrun (its parent) at that step of a run that started without a
snapshot; torchrun forwards the signal to every worker and then ends. Run the job again (as a scheduler
requeues it) with the same `--snapshots` folder (OUTDIR by default) and it resumes at that step.
Each rank records what happened in OUTDIR/rank<RANK>.json ({"RANK", "events", "final"}), rewritten
atomically after every event, so a killed attempt's events survive and the next attempt adds to them;
rank 0 stores its final parameters there. Nothing is printed: the prints of several processes interleave.
"""

import datetime
import faulthandler
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.ddp_practice import load_snapshot, new_training, save_snapshot, snapshot_step, train_epochs
from helpers.scripts import exit_without_teardown


def log(outdir: str, rank: int, final: list[float] | None = None, **event) -> None:
    """Add an event to this rank's record (kept across attempts) and write it atomically."""
    path = os.path.join(outdir, f"rank{rank}.json")
    entry = {"RANK": rank, "events": [], "final": None}
    if os.path.exists(path):
        with open(path) as f:
            entry = json.load(f)
    entry["events"].append({"time": time.time(), **event})
    if final is not None:
        entry["final"] = final
    with open(path + ".tmp", "w") as f:
        json.dump(entry, f)
    os.replace(path + ".tmp", path)


def join_group(rank: int, world: int, attempt: int) -> bool | None:
    """Join the group in a store of this attempt's own. Returns whether a key that rank 0 of the previous
    attempt wrote into the shared store is still there (None in the first attempt, or without a shared
    store): the reason each attempt needs a prefix of its own."""
    timeout = datetime.timedelta(seconds=30)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":  # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
        dist.init_process_group("gloo", timeout=timeout)  # env://: a new store for each attempt anyway
        return None
    shared = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False, timeout)
    stale = shared.check([f"course/attempt{attempt - 1}"]) if attempt > 0 else None
    store = dist.PrefixStore(f"attempt{attempt}", shared)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    if rank == 0:
        shared.set(f"course/attempt{attempt}", "rank 0 was here")
    return stale


def parse(argv: list[str]) -> tuple[str, int, dict[str, tuple[int, ...]], str]:
    """OUTDIR, EPOCHS, the faults asked for ({"kill": ..., "fail": ..., "preempt": ...}), the snapshot folder."""
    outdir, epochs = argv[1], int(argv[2])
    faults, snapshots = {}, outdir
    rest = argv[3:]
    for flag, value in zip(rest[::2], rest[1::2], strict=True):
        if flag == "--snapshots":
            snapshots = value
        elif flag in ("--kill", "--fail", "--preempt"):
            faults[flag[2:]] = tuple(int(n) for n in value.split(","))
        else:
            raise SystemExit(f"unknown option {flag}")
    return outdir, epochs, faults, snapshots


class Stopped(Exception):
    """Every rank agreed to stop at this step (SIGTERM), after rank 0 wrote its snapshot."""


def stop_requested(flag: list[int]) -> bool:
    """Whether any rank got SIGTERM: one tiny all-reduce per step, so that all ranks stop at the same step
    (a rank that stopped alone would leave the others waiting in the next step's all-reduce)."""
    mine = torch.tensor([float(bool(flag))])
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return bool(mine.item())


@record
def main() -> None:
    faulthandler.enable()
    outdir, epochs, faults, snapshots = parse(sys.argv)
    sigterm: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: sigterm.append(signum))  # act on it between steps
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    stale = join_group(rank, world, attempt)
    snapshot = os.path.join(snapshots, "snapshot.pt")
    fresh = not os.path.exists(snapshot)
    model, optimizer = new_training()
    ddp = DDP(model)
    start = load_snapshot(snapshot, model, optimizer)  # every rank reads rank 0's last snapshot
    first_step = snapshot_step(snapshot)  # steps of epoch `start` done before a SIGTERM
    where = {"start_epoch": start, "start_step": first_step, "previous_attempt_key_found": stale}
    log(outdir, rank, event="start", attempt=attempt, **where)

    def before_step(epoch: int, step: int) -> None:
        if faults.get("kill") == (rank, epoch, step) and attempt == 0:
            log(outdir, rank, event="kill", attempt=attempt, epoch=epoch, step=step)
            os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer sends
        if faults.get("fail", (None, None))[:2] == (rank, epoch):
            raise FloatingPointError(f"loss is NaN at epoch {epoch}, step {step}")
        if faults.get("preempt") == (rank, epoch, step) and fresh:
            log(outdir, rank, event="preempt", attempt=attempt, epoch=epoch, step=step)
            os.kill(os.getppid(), signal.SIGTERM)  # what a scheduler sends the job on preemption
            deadline = time.monotonic() + 10
            while not sigterm and time.monotonic() < deadline:  # torchrun forwards it to every worker
                time.sleep(0.01)
        if stop_requested(sigterm):
            if rank == 0:
                save_snapshot(snapshot, ddp, optimizer, epoch - 1, step=step)  # epoch - 1 is the last whole one
            dist.barrier()  # nobody leaves before the snapshot exists
            log(outdir, rank, event="stopped by SIGTERM", attempt=attempt, epoch=epoch, step=step)
            raise Stopped

    def after_epoch(epoch: int) -> None:
        if rank == 0:
            save_snapshot(snapshot, ddp, optimizer, epoch)  # one writer; atomic (write, then rename)
        dist.barrier()  # nobody starts the next epoch before the snapshot of this one exists
        log(outdir, rank, event="epoch done", attempt=attempt, epoch=epoch)

    try:
        train_epochs(ddp, optimizer, range(start, epochs), rank, before_step, after_epoch, first_step)
    except Stopped:
        dist.destroy_process_group()
        exit_without_teardown()  # exit code 0: the snapshot is written; the agent ends the job anyway
    final = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    log(outdir, rank, event="finished", attempt=attempt, final=final.tolist() if rank == 0 else None)
    dist.barrier()
    dist.destroy_process_group()
    exit_without_teardown()  # a workaround for torch 2.13 (see ddp_train.py), after everything is written


if __name__ == "__main__":
    main()
