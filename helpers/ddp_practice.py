"""Chapter 07, DDP in practice: gradient accumulation and `no_sync`, the errors people hit, buffers and
BatchNorm (and which forwards copy rank 0's buffers), exact evaluation, torchrun jobs that survive a
killed rank or a preemption (SIGTERM, a mid-epoch snapshot, a requeue), finding the failing rank, and a
first look at what comes after DDP (`ZeroRedundancyOptimizer`).

The rank functions here are run by the course's launcher (`launch`: a process group on 127.0.0.1, a free
port per run, results returned per rank). They are module functions, so spawn and forkserver children
can import them by name. Ranks never print; they return results, and the notebook prints them by rank.
The torchrun jobs run `helpers/scripts/resumable_train.py` (loopback only, in a private network
namespace where Linux allows it, `TMPDIR` in a folder that is removed afterwards).
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from helpers import launcher as _launcher
from helpers.distributed import make_model
from helpers.environment import default_start_method
from helpers.errors import captured_stderr, clean, error_line, short_error
from helpers.flight_records import FR_FIELDS, side_by_side
from helpers.validate import non_negative, positive_int

__all__ = [
    "SCRIPT",
    "HEAVY",
    "launch",
    "micro_batches",
    "accumulated_gradient",
    "count_syncs",
    "accumulate_plain",
    "accumulate_no_sync",
    "track_held_samples",
    "accumulation_rank",
    "count_plain",
    "count_no_sync",
    "accumulation_timing",
    "accumulate_plain_mse",
    "accumulate_no_sync_mse",
    "step_times",
    "lr_scaling",
    "Branchy",
    "unused_branch",
    "unused_plain",
    "unused_found",
    "static_never",
    "static_sometimes",
    "rank_dependent",
    "BnNet",
    "buffers_and_batchnorm",
    "buffer_sync_rule",
    "evaluation",
    "ShardedStream",
    "monitored",
    "side_group",
    "missing_one",
    "missing_zero",
    "lonely_rank",
    "desync",
    "flight_records",
    "side_by_side",
    "fr_trace",
    "zero_memory",
    "epoch_batches",
    "new_training",
    "train_epochs",
    "uninterrupted",
    "save_snapshot",
    "load_snapshot",
    "snapshot_step",
    "resume_run",
    "ResumableJob",
    "torchrun_job",
    "crash_and_resume",
    "preempted_job",
    "failing_job",
    "root_cause",
    "restart_seconds",
    "pickled_by_reference",
    "no_sync_saving",
    "restart_overhead",
]

SCRIPT = Path(__file__).resolve().parent / "scripts" / "resumable_train.py"
# As wide as notebook 05's communication-heavy model (section 10), with a 2,048-wide output layer too: 32
# samples per step, four 2,048 x 2,048 layers, 64 MiB of gradients to all-reduce for little computation.
HEAVY = {"batch": 32, "width": 2048, "depth": 3}


# ------------------------------------------------------------------------------------------- launch
def launch(demos: Sequence[Any], world_size: int = 2, **options: Any) -> dict[int, dict[str, Any]]:
    """The course's launcher (`helpers.launcher.launch`: ranks on 127.0.0.1, a free port per run, each
    rank's results returned), with one addition for forked ranks: DDP imports `torch._dynamo` the first
    time a process builds one (about 3 s of CPU per process on a 2-core laptop). Imported here first,
    every forked rank inherits it; spawned ranks import it anyway."""
    if (options.get("start_method") or default_start_method()) == "fork":
        import torch._dynamo  # noqa: F401 - imported for its side effect, see above
    return _launcher.launch(demos, world_size, **options)


# --------------------------------------------------------------------------------------------- output
# ------------------------------------------------------------------------- 1. gradient accumulation
def micro_batches(k: int, size: int, rank: int = 0, seed: int = 7) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """`k` regression micro-batches of `size` samples for `rank` (the same on every call)."""
    k, size = positive_int("k", k), positive_int("size", size)
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return [(torch.randn(size, 4, generator=gen), torch.randn(size, 2, generator=gen)) for _ in range(k)]


def _flat_grad(model: Any) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def accumulated_gradient(k: int = 4, size: int = 8) -> dict[str, Any]:
    """One process: the gradient of `k` micro-batches (each loss divided by `k`, backward after each)
    against the gradient of the one batch of `k * size` samples they make together."""
    from torch import nn

    batches = micro_batches(k, size)
    model = make_model()
    for x, y in batches:
        (nn.functional.mse_loss(model(x), y) / k).backward()  # .grad adds up across backward calls
    accumulated = _flat_grad(model)
    whole = make_model()
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    nn.functional.mse_loss(whole(x), y).backward()
    full = _flat_grad(whole)
    return {
        "allclose": torch.allclose(accumulated, full, atol=1e-6),
        "bitwise equal": torch.equal(accumulated, full),
        "max abs difference < 1e-6": (accumulated - full).abs().max().item() < 1e-6,
    }


def count_syncs(ddp: Any) -> dict[str, int]:
    """Register a communication hook that all-reduces as DDP would (`allreduce_hook`) and counts: the
    hook runs once per gradient bucket, and `bucket.is_last()` is True once per synchronising backward.
    Returns the live counter {"buckets": ..., "syncs": ...}; register before the first forward."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    counter = {"buckets": 0, "syncs": 0}

    # No annotations: DDP checks that `bucket` is annotated as dist.GradBucket if at all, and this
    # module's annotations are strings (`from __future__ import annotations`).
    def hook(state, bucket):  # noqa: ANN001, ANN202
        counter["buckets"] += 1
        counter["syncs"] += int(bucket.is_last())
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    return counter


def accumulate_plain(ddp: Any, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Accumulate without `no_sync`: correct, but every backward all-reduces."""
    from torch import nn

    for x, y in batches:
        (nn.functional.mse_loss(ddp(x), y) / len(batches)).backward()


def accumulate_no_sync(ddp: Any, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Accumulate with `no_sync()` on all micro-batches but the last: one all-reduce per optimizer step."""
    from torch import nn

    *first, last = batches
    with ddp.no_sync():  # backward only adds to .grad, no all-reduce
        for x, y in first:
            (nn.functional.mse_loss(ddp(x), y) / len(batches)).backward()
    x, y = last
    (nn.functional.mse_loss(ddp(x), y) / len(batches)).backward()  # all-reduces the sum of all k


def track_held_samples(module: Any) -> dict[str, int]:
    """Measure what accumulation is for, memory: a forward keeps its activations until the backward has
    gone through them. Hooks on `module` count the samples of every forward whose output still waits
    for its gradient (`held`), the most at any moment (`peak`) and the largest single forward
    (`largest`). Accumulating k micro-batches of `size` right holds `size` samples at a time; one forward
    over all of them, or k forwards before one backward, holds k times as many."""
    state = {"held": 0, "peak": 0, "largest": 0}

    def after_forward(mod, args, output):  # noqa: ANN001, ANN202
        if not isinstance(output, torch.Tensor) or not output.requires_grad:
            return
        rows = output.shape[0] if output.dim() else 1
        state["held"] += rows
        state["peak"] = max(state["peak"], state["held"])
        state["largest"] = max(state["largest"], rows)

        def released(grad):  # noqa: ANN001, ANN202
            state["held"] -= rows

        output.register_hook(released)

    module.register_forward_hook(after_forward)
    return state


def accumulation_rank(
    rank: int, world_size: int, accumulate: Callable[..., Any] | None = None, k: int = 4, size: int = 8, steps: int = 2
) -> dict[str, Any]:
    """In each rank: `steps` optimizer steps of `k` micro-batches with `accumulate(ddp, batches)`; the
    synchronising backward passes and hook calls per step, and the first step's gradient against one
    process on all ranks' micro-batches together (plain sum, k times it, and this rank's own), with the
    number of those micro-batches."""
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    accumulate = accumulate or accumulate_no_sync
    ddp = DDP(make_model())
    counter = count_syncs(ddp)
    held = track_held_samples(ddp.module)
    per_step = []
    out: dict[str, Any] = {}
    for step in range(steps):
        before = dict(counter)
        ddp.zero_grad()
        try:
            accumulate(ddp, micro_batches(k, size, rank, seed=step))
        except Exception as exc:  # noqa: BLE001 - a learner's function may raise anything
            return {"error": short_error(exc)}
        per_step.append({key: counter[key] - before[key] for key in counter})
        out.update(peak_held=held["peak"], largest_forward=held["largest"], size=size)
        if step == 0:
            got = _flat_grad(ddp.module)
            single = make_model()
            every = [b for r in range(world_size) for b in micro_batches(k, size, r, seed=0)]
            x, y = torch.cat([b[0] for b in every]), torch.cat([b[1] for b in every])
            nn.functional.mse_loss(single(x), y).backward()
            full = _flat_grad(single)
            local = make_model()
            for x, y in micro_batches(k, size, rank, seed=0):
                (nn.functional.mse_loss(local(x), y) / k).backward()
            out.update(
                micro_batches=len(every),
                full=torch.allclose(got, full, atol=1e-6),
                k_times=torch.allclose(got, k * full, atol=1e-5),
                local=torch.allclose(got, _flat_grad(local), atol=1e-6),
            )
        dist.barrier()  # a rank that skipped its all-reduce would otherwise pair with the next step's
    return {"error": "", "per_step": per_step, **out}


def count_plain(rank: int, world_size: int) -> dict[str, Any]:
    """`accumulation_rank` without `no_sync`."""
    return accumulation_rank(rank, world_size, accumulate_plain)


def count_no_sync(rank: int, world_size: int) -> dict[str, Any]:
    """`accumulation_rank` with `no_sync` on all micro-batches but the last."""
    return accumulation_rank(rank, world_size, accumulate_no_sync)


def _timed_steps(ddp: Any, optimizer: Any, accumulate: Callable[..., Any], batches: list, steps: int) -> float:
    import torch.distributed as dist

    dist.barrier()
    started = time.perf_counter()
    for _ in range(steps):
        optimizer.zero_grad()
        accumulate(ddp, batches)
        optimizer.step()
    dist.barrier()
    return (time.perf_counter() - started) / steps


def accumulation_timing(
    rank: int, world_size: int, k: int = 4, steps: int = 2, repeats: int = 3, width: int = HEAVY["width"]
) -> dict[str, Any]:
    """Seconds per optimizer step of `k`-step accumulation on the communication-heavy model, with and
    without `no_sync`, alternating the two `repeats` times after one warm-up step each (so a burst of
    load hits both), plus the hook calls of the first iteration and of a later one (DDP rebuilds its
    buckets after the first)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    depth = HEAVY["depth"]
    ddp = DDP(make_model(width=width, depth=depth, inputs=width, outputs=width))
    counter = count_syncs(ddp)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(rank)
    batches = [(torch.randn(HEAVY["batch"], width, generator=gen),) * 2 for _ in range(k)]
    buckets = []
    for _ in range(2):  # warm-up; the first iteration uses the initial buckets, later ones the rebuilt
        before = counter["buckets"]
        _timed_steps(ddp, optimizer, accumulate_plain_mse, batches, 1)
        buckets.append((counter["buckets"] - before) // k)
    _timed_steps(ddp, optimizer, accumulate_no_sync_mse, batches, 1)
    times: dict[str, list[float]] = {"no_sync": [], "plain": []}
    for _ in range(repeats):
        times["plain"].append(_timed_steps(ddp, optimizer, accumulate_plain_mse, batches, steps))
        times["no_sync"].append(_timed_steps(ddp, optimizer, accumulate_no_sync_mse, batches, steps))
    return {"times": times, "buckets first iteration": buckets[0], "buckets later": buckets[1]}


def step_times(results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Seconds per optimizer step, "plain" and "no_sync", from a launch of `accumulation_timing`: for each
    repeat the slowest rank (a step ends when every rank has finished it), then median and range."""
    from helpers.timing import spread

    rows = [results[r]["accumulation_timing"]["times"] for r in sorted(results)]
    return {name: spread(max(times) for times in zip(*(row[name] for row in rows), strict=True)) for name in rows[0]}


def _mse_accumulate(ddp: Any, batches: Sequence[tuple[torch.Tensor, ...]], sync_every: bool) -> None:
    from torch import nn

    for i, (x, y) in enumerate(batches):
        last = i == len(batches) - 1
        with contextlib.nullcontext() if sync_every or last else ddp.no_sync():
            (nn.functional.mse_loss(ddp(x), y) / len(batches)).backward()


def accumulate_plain_mse(ddp: Any, batches: Sequence[tuple[torch.Tensor, ...]]) -> None:
    """`accumulate_plain` for batches whose target is the input (the wide model of the timing)."""
    _mse_accumulate(ddp, batches, sync_every=True)


def accumulate_no_sync_mse(ddp: Any, batches: Sequence[tuple[torch.Tensor, ...]]) -> None:
    """`accumulate_no_sync` for batches whose target is the input (the wide model of the timing)."""
    _mse_accumulate(ddp, batches, sync_every=False)


# ---------------------------------------------------------------------- 2. batch size and learning rate
def lr_scaling(
    runs: dict[str, tuple[int, float]], epochs: int = 6, samples: int = 512, warmup: int = 0
) -> dict[str, list[float]]:
    """One process, the same data and epochs for every run: for each name, (batch, lr) of plain SGD on a
    linear regression; the full-data loss after each epoch. A bigger global batch (more ranks, or more
    accumulation) takes fewer steps per epoch. `warmup` steps ramp the learning rate up linearly."""
    from torch import nn

    if not isinstance(runs, dict) or not runs:
        raise TypeError("runs must be a non-empty dict of name -> (batch, lr)")
    epochs, samples = positive_int("epochs", epochs), positive_int("samples", samples)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(samples, 16, generator=gen)
    y = x @ torch.randn(16, 1, generator=gen) + 0.1 * torch.randn(samples, 1, generator=gen)
    curves = {}
    for name, (batch, lr) in runs.items():
        positive_int("batch", batch)
        torch.manual_seed(0)
        model = nn.Linear(16, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        curve, step = [], 0
        for _ in range(epochs):
            for start in range(0, samples, batch):
                step += 1
                for group in optimizer.param_groups:
                    group["lr"] = lr * min(1.0, step / warmup) if warmup else lr
                optimizer.zero_grad()
                nn.functional.mse_loss(model(x[start : start + batch]), y[start : start + batch]).backward()
                optimizer.step()
            with torch.no_grad():
                curve.append(nn.functional.mse_loss(model(x), y).item())
        curves[name] = curve
    return curves


# ------------------------------------------------------------------------- 3. unused parameters
class Branchy(torch.nn.Module):
    """A trunk and an extra branch that the forward uses only when asked: `model(x, use_branch)`."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk = torch.nn.Linear(4, 4)
        self.branch = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor, use_branch: bool) -> torch.Tensor:
        h = torch.relu(self.trunk(x))
        if use_branch:
            h = h + torch.relu(self.branch(h))
        return self.head(h)


def _error_text(exc: BaseException) -> list[str]:
    """The lines of a DDP error that carry the lesson, cleaned (paths, addresses)."""
    return [clean(line.strip()) for line in str(exc).splitlines() if line.strip()]


def unused_branch(
    rank: int, world_size: int, mode: str = "plain", uses: str = "odd steps", steps: int = 4, timeout: float = 2.0
) -> dict[str, Any]:
    """Train `Branchy` for `steps` steps under DDP and report how it ends.

    `uses`: when the branch runs: "odd steps" (not in step 0), "never", or "rank 0" (only on rank 0: the
    ranks disagree). `mode`: "plain", "find_unused" (`find_unused_parameters=True`) or "static"
    (`static_graph=True`). The model runs on a group of its own with a `timeout`-second limit, so a rank
    left waiting for the other's all-reduce fails after `timeout` s instead of 30 minutes."""

    if mode not in ("plain", "find_unused", "static"):
        raise ValueError(f"mode must be 'plain', 'find_unused' or 'static', got {mode!r}")
    if uses not in ("odd steps", "never", "rank 0"):
        raise ValueError(f"uses must be 'odd steps', 'never' or 'rank 0', got {uses!r}")
    import torch.distributed as dist

    with captured_stderr() as log:
        result = _train_branchy(rank, world_size, mode, uses, steps, timeout)
    dist.barrier()  # on the default group: a rank that failed early waits here for the others
    return {**result, "log": log}


def side_group(timeout: float) -> Any:
    """A process group of its own whose collectives give up after `timeout` seconds.

    Not `dist.new_group(timeout=...)` alone: a group's timeout also bounds its setup, where each rank waits
    in the store for the others' addresses, so a rank that came to `new_group` more than `timeout` s after
    the other (a busy machine) made it fail outside the demo, and the demo's result was lost. The group is
    made with the default group's timeout and then given the short one, which torch offers only through a
    private function (`_set_pg_timeout`, torch/distributed/distributed_c10d.py). DDP's all-reduces and
    `all_reduce` follow it (a rank left alone raises after `timeout` s); a rank other than 0 waiting in
    `monitored_barrier` does not (it waited past the default group's 30 s), so `monitored` keeps
    `new_group(timeout=...)` and meets the other ranks in a barrier of the default group first."""
    if non_negative("timeout", timeout) == 0:
        raise ValueError("timeout must be > 0 seconds, got 0")
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _set_pg_timeout

    group = dist.new_group()
    _set_pg_timeout(datetime.timedelta(seconds=timeout), group)
    return group


def _train_branchy(rank: int, world_size: int, mode: str, uses: str, steps: int, timeout: float) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    group = side_group(timeout)
    find_unused, static = mode == "find_unused", mode == "static"
    ddp = DDP(Branchy(), process_group=group, find_unused_parameters=find_unused, static_graph=static)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    started = time.monotonic()
    for step in range(steps):
        use = {"odd steps": step % 2 == 1, "never": False, "rank 0": rank == 0}[uses]
        try:
            optimizer.zero_grad()
            ddp(torch.randn(8, 4, generator=gen), use).pow(2).mean().backward()
            optimizer.step()
        except Exception as exc:  # noqa: BLE001 - the error is the result
            return {"step": step, "error": _error_text(exc), "seconds": time.monotonic() - started}
    flat = torch.cat([p.detach().reshape(-1) for p in ddp.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(world_size)]
    dist.all_gather(everyone, flat, group=group)
    same = all(torch.equal(everyone[0], other) for other in everyone)
    return {"step": steps, "error": [], "params identical on all ranks": same}


def unused_plain(rank: int, world_size: int) -> dict[str, Any]:
    """The branch runs on odd steps only, plain DDP: the error at the next forward."""
    return unused_branch(rank, world_size, mode="plain", uses="odd steps")


def unused_found(rank: int, world_size: int) -> dict[str, Any]:
    """The same model with `find_unused_parameters=True`: it trains."""
    return unused_branch(rank, world_size, mode="find_unused", uses="odd steps")


def static_never(rank: int, world_size: int) -> dict[str, Any]:
    """`static_graph=True` with a branch that never runs: the unused set never changes, it trains."""
    return unused_branch(rank, world_size, mode="static", uses="never")


def static_sometimes(rank: int, world_size: int) -> dict[str, Any]:
    """`static_graph=True` with the branch on odd steps: the graph changes, its own error."""
    return unused_branch(rank, world_size, mode="static", uses="odd steps")


def rank_dependent(rank: int, world_size: int) -> dict[str, Any]:
    """The branch runs on rank 0 only: rank 0 waits in backward for an all-reduce rank 1 never starts."""
    return unused_branch(rank, world_size, mode="plain", uses="rank 0")


# ----------------------------------------------------------------------------- 4. buffers, BatchNorm
class BnNet(torch.nn.Module):
    """Linear -> BatchNorm1d -> Linear: BatchNorm's running mean and variance are buffers, not parameters."""

    def __init__(self, norm: type = torch.nn.BatchNorm1d) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inner = torch.nn.Linear(3, 3)
        self.norm = norm(3)
        self.outer = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(self.norm(self.inner(x)))


def _same_everywhere(tensor: torch.Tensor) -> bool:
    import torch.distributed as dist

    everyone = [torch.zeros_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, tensor.detach().contiguous())
    return all(torch.allclose(everyone[0], other) for other in everyone)


def buffers_and_batchnorm(rank: int, world_size: int) -> dict[str, Any]:
    """BatchNorm under DDP, each rank with data of its own mean (rank r: mean 3 r):

    - after a training forward each rank has updated its running statistics with its own batch;
    - the next forward first copies rank 0's buffers to every rank (`forward_sync_buffers`, default on),
      because the previous forward ran with grad enabled and outside `no_sync` (`buffer_sync_rule` has
      the whole rule); so after an eval forward (which updates nothing) they are equal, and rank 0's;
    - `forward_sync_buffers=False` keeps them per rank; `broadcast_buffers` warns (deprecated);
    - averaging the statistics over ranks by hand gives the mean of the whole batch exactly, but not its
      variance (the spread *between* ranks is missing);
    - DDP refuses a CPU module that holds `SyncBatchNorm` layers ("SyncBatchNorm layers only work with GPU
      modules")."""
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(16, 3, generator=gen) + 3.0 * rank
    out: dict[str, Any] = {}
    ddp = DDP(BnNet())
    ddp(x).sum().backward()
    stats = ddp.module.norm.running_mean.clone()
    out["equal after a training forward"] = _same_everywhere(stats)
    rank0 = stats.clone()
    dist.broadcast(rank0, src=0)
    ddp.eval()
    with torch.no_grad():
        ddp(x)
    after = ddp.module.norm.running_mean
    out["equal after an eval forward"] = _same_everywhere(after)
    out["equal to rank 0's"] = torch.equal(after, rank0)

    per_rank = DDP(BnNet(), forward_sync_buffers=False)
    per_rank(x).sum().backward()
    per_rank.eval()
    with torch.no_grad():
        per_rank(x)
    out["forward_sync_buffers=False: equal after eval"] = _same_everywhere(per_rank.module.norm.running_mean)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        DDP(BnNet(), broadcast_buffers=False)
    out["broadcast_buffers warns"] = [f"{w.category.__name__}: {str(w.message).split('. ')[0]}" for w in caught]

    # averaging the running statistics by hand: the whole batch's mean exactly, not its variance
    local = BnNet()
    local(x)
    mean, var = local.norm.running_mean.clone(), local.norm.running_var.clone()
    dist.all_reduce(mean, op=dist.ReduceOp.AVG)
    dist.all_reduce(var, op=dist.ReduceOp.AVG)
    everyone = [torch.zeros_like(x) for _ in range(world_size)]
    dist.all_gather(everyone, x)
    whole = BnNet()
    whole(torch.cat(everyone))
    out["averaged mean == whole batch's"] = torch.allclose(mean, whole.norm.running_mean, atol=1e-6)
    out["averaged var == whole batch's"] = torch.allclose(var, whole.norm.running_var, atol=1e-4)

    try:
        DDP(nn.SyncBatchNorm.convert_sync_batchnorm(BnNet()))(x)
        out["SyncBatchNorm on CPU"] = "ran"
    except Exception as exc:  # noqa: BLE001 - the error is the lesson
        out["SyncBatchNorm on CPU"] = short_error(exc)
    return out


def buffer_sync_rule(rank: int, world_size: int) -> dict[str, bool]:
    """Which forwards copy rank 0's buffers. DDP syncs them before a forward only when the *previous*
    forward ran with grad enabled and outside `no_sync` (the first forward always): `_post_forward` in
    torch/nn/parallel/distributed.py sets `require_forward_param_sync` from `torch.is_grad_enabled()`
    and `require_backward_grad_sync`, and `_pre_forward` syncs only when it is set. Each probe writes the
    rank's number into BatchNorm's running mean, runs one forward (eval mode: BatchNorm updates no
    statistics, so only a sync can change them), and reports whether every rank then holds rank 0's."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(BnNet())
    ddp.eval()
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(rank))
    buffer = ddp.module.norm.running_mean

    def probe(grad: bool, in_no_sync: bool = False) -> bool:
        with torch.no_grad():
            buffer.fill_(float(rank))
        with ddp.no_sync() if in_no_sync else contextlib.nullcontext(), torch.set_grad_enabled(grad):
            out = ddp(x).sum()
            if grad:
                out.backward()
        return _same_everywhere(buffer) and buffer.eq(0.0).all().item()

    rows = [
        ("first forward, with grad", True, False),
        ("no_grad, after a forward with grad", False, False),
        ("no_grad, after a no_grad forward", False, False),
        ("with grad, after a no_grad forward", True, False),
        ("with grad, after a forward with grad", True, False),
        ("inside no_sync, after a forward with grad", True, True),
        ("with grad, after a forward inside no_sync", True, False),
    ]
    return {label: probe(grad, in_no_sync) for label, grad, in_no_sync in rows}


# ------------------------------------------------------------------------------------- 5. evaluation
def _is_correct(index: int) -> bool:
    """The 'model' of the evaluation: right on the even samples, wrong on the odd ones."""
    return index % 2 == 0


def evaluation(rank: int, world_size: int, samples: int = 11) -> dict[str, Any]:
    """Accuracy over `samples` samples on `world_size` ranks with `DistributedSampler`: each rank's mean,
    averaged with all_reduce (padding counts a duplicate), with `drop_last=True` (drops the tail), and
    exactly (gather (index, correct) pairs, count each index once)."""
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    data = list(range(samples))
    out: dict[str, Any] = {"exact accuracy": sum(map(_is_correct, data)) / samples}
    for drop_last in (False, True):
        sampler = DistributedSampler(data, shuffle=False, drop_last=drop_last)
        seen = [int(i) for batch in DataLoader(data, batch_size=4, sampler=sampler) for i in batch]
        mean = torch.tensor(sum(map(_is_correct, seen)) / len(seen), dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        out[f"drop_last={drop_last}: indices"] = seen
        out[f"drop_last={drop_last}: averaged accuracy"] = mean.item()
        if not drop_last:
            pairs: list[Any] = [None] * world_size
            dist.all_gather_object(pairs, [(i, _is_correct(i)) for i in seen])
            unique = dict(pair for part in pairs for pair in part)  # the same index gives the same result
            out["gathered samples"] = sum(len(part) for part in pairs)
            out["exact from gathered"] = sum(unique.values()) / len(unique)
    return out


class ShardedStream(torch.utils.data.IterableDataset):
    """A stream of `n` numbers, sharded over ranks and DataLoader workers: shard = rank x workers + worker
    id, out of world size x workers. The rank is given to the constructor, in the rank's process, and the
    worker id is read in the worker (a spawned worker has no process group to ask). `by_rank_only` is the
    common bug."""

    def __init__(self, n: int, rank: int, world_size: int, by_rank_only: bool = False) -> None:
        self.n = positive_int("n", n)
        self.world_size = positive_int("world_size", world_size)
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size:
            raise ValueError(f"rank must be an int from 0 to world_size - 1 ({world_size - 1}), got {rank!r}")
        self.rank = rank
        self.by_rank_only = by_rank_only

    def __iter__(self) -> Iterator[int]:
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        if self.by_rank_only:
            workers, worker = 1, 0
        shard, shards = self.rank * workers + worker, self.world_size * workers
        yield from range(shard, self.n, shards)


# ------------------------------------------------------------------------------- 7. missing ranks
def monitored(rank: int, world_size: int, absent: int = 1, timeout: float = 2.0) -> dict[str, Any]:
    """Rank `absent` does not arrive; every other rank calls `monitored_barrier` with a `timeout`-second
    limit on a group of its own (made after a barrier of the default group). Rank 0 collects the others
    and can name the one missing; a rank other than 0 only waits for rank 0's answer. Afterwards all meet
    in a barrier of the default group."""
    import torch.distributed as dist

    # The group's timeout also bounds its setup, and a rank other than 0 waits for rank 0 with that timeout,
    # not the one set later by `_set_pg_timeout` (see `side_group`): so the ranks meet first in the default
    # group: a rank that the demo before let go seconds after the other still forms the group in time.
    dist.barrier()
    group = dist.new_group(timeout=datetime.timedelta(seconds=timeout))  # how long a rank other than 0 waits
    started = time.monotonic()
    out: dict[str, Any] = {"arrived": rank != absent, "error": ""}
    if rank != absent:
        try:
            with captured_stderr():  # gloo also logs the error, with a time stamp
                dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=timeout))
        except Exception as exc:  # noqa: BLE001 - the error is the result
            out.update(error=short_error(exc), seconds=time.monotonic() - started)
    dist.barrier()  # the absent rank arrives here, where the others come once their call has failed
    return out


def missing_one(rank: int, world_size: int) -> dict[str, Any]:
    """`monitored` with rank 1 missing: rank 0 names it."""
    return monitored(rank, world_size, absent=1)


def missing_zero(rank: int, world_size: int) -> dict[str, Any]:
    """`monitored` with rank 0 missing: nobody can name it."""
    return monitored(rank, world_size, absent=0)


def lonely_rank(timeout: float = 2.0) -> dict[str, Any]:
    """Rank 0 of 2 joins a group whose rank 1 never comes, with `timeout=`: how it fails and after how long.
    The rendezvous is a file (`file://`), so nothing listens on the network. Run it in a child process."""
    import torch.distributed as dist

    with tempfile.TemporaryDirectory(prefix="lonely-") as tmp:
        started = time.monotonic()
        try:
            dist.init_process_group(
                "gloo",
                init_method=f"file://{tmp}/rendezvous",
                rank=0,
                world_size=2,
                timeout=datetime.timedelta(seconds=timeout),
            )
        except Exception as exc:  # noqa: BLE001 - the error is the result
            return {"error": short_error(exc), "seconds": time.monotonic() - started}
        dist.destroy_process_group()
    return {"error": "", "seconds": time.monotonic() - started}


# ------------------------------------------------------------------------------ 7. the Flight Recorder
def desync(rank: int, world_size: int, steps: int = 4, every: int = 2, timeout: float = 2.0) -> dict[str, Any]:
    """A training loop with a rank-dependent bug, on a group of its own with a `timeout`-second limit.
    Every step all-reduces 8 gradients; every `every` steps rank 0 broadcasts a stop flag of 2 numbers.
    Rank 1 counts its steps from 1, so it broadcasts one step early: from then on the two ranks call
    different collectives. When the mismatched call times out, each rank dumps its Flight Recorder (on by
    default; `TORCH_FR_BUFFER_SIZE` sets its size) without stack traces, which take seconds to symbolise."""
    import pickle

    import torch.distributed as dist

    dist.barrier()  # the ranks arrive together: a group's timeout also bounds its own setup
    group = dist.new_group(timeout=datetime.timedelta(seconds=timeout))
    grads, flag = torch.ones(8), torch.zeros(2)
    out: dict[str, Any] = {"error": "", "step": None}
    try:
        for step in range(steps):
            dist.all_reduce(grads, group=group)
            counted = step + 1 if rank == 1 else step  # the bug: rank 1 counts from 1
            if counted % every == every - 1:
                dist.broadcast(flag, src=0, group=group)
    except Exception as exc:  # noqa: BLE001 - the timeout is the result
        out.update(error=short_error(exc), step=step)
    dump = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(includeStackTraces=False))
    name = dist.distributed_c10d._get_process_group_name(group)
    out["records"] = [{k: e[k] for k in FR_FIELDS} for e in dump["entries"] if e["process_group"][0] == name]
    out["dump"] = {**dump, "entries": [e for e in dump["entries"] if e["process_group"][0] == name]}
    out["group"] = name
    return out


def flight_records(timeout: float = 2.0, steps: int = 4, every: int = 2) -> dict[int, dict[str, Any]]:
    """Run `desync` on 2 ranks with a Flight Recorder of 100 entries (`TORCH_FR_BUFFER_SIZE=100` in the
    ranks' environment; without it, 2,000: it is on by default) and return each rank's result, records
    included."""
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    options = {
        "desync": {
            "timeout": float(timeout),
            "steps": positive_int("steps", steps),
            "every": positive_int("every", every),
        }
    }
    results = launch([desync], 2, env={"TORCH_FR_BUFFER_SIZE": "100"}, kwargs=options, timeout=60, failures="report")
    return {rank: results[rank]["desync"] for rank in sorted(results)}


def fr_trace(results: dict[int, dict[str, Any]], timeout: float = 60.0) -> list[str]:
    """Write each rank's dump into a folder as `rank_<r>` and run torch's analyser on it, as you would
    on a job's dumps: `python -m torch.distributed.flight_recorder.fr_trace <folder>`. Returns its
    report's lines, up to the stack trace (which holds this machine's paths).

    One repair first: on gloo, torch 2.13's dump lists the group under an empty name in `pg_config`
    while its records name it (e.g. '1'), and the analyser then stops with a KeyError; the group's
    entry is filled in from the records, with the ranks that took part."""
    import pickle

    with tempfile.TemporaryDirectory(prefix="fr-") as folder:
        for rank, result in results.items():
            dump = dict(result["dump"])
            name = result["group"]
            if name not in dump.get("pg_config", {}):
                desc = dump["entries"][0]["process_group"][1] if dump["entries"] else ""
                dump["pg_config"] = {name: {"name": name, "desc": desc, "ranks": str(sorted(results))}}
            with open(os.path.join(folder, f"rank_{rank}"), "wb") as f:
                pickle.dump(dump, f)
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", folder],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    lines = []
    for line in (done.stdout + done.stderr).splitlines():
        if "stack trace" in line:
            break
        if line.strip() and "tabulate" not in line:
            lines.append(clean(line))
    return lines


# --------------------------------------------------------------------------------- 9. what comes next
def _state_bytes(optimizer: Any) -> int:
    return sum(
        t.numel() * t.element_size()
        for state in optimizer.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor) and t.dim() > 0
    )


def zero_memory(rank: int, world_size: int, width: int = 256) -> dict[str, Any]:
    """Adam's state (two tensors per parameter) held by this rank after one step: plain Adam (what one
    rank, or every DDP rank, holds) and `ZeroRedundancyOptimizer`, which shards it over the ranks. The
    optimizer is deleted and collected before the group is destroyed (a live one made
    `destroy_process_group` abort now and then)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(make_model(width=width, depth=2, inputs=width, outputs=width))
    x = torch.randn(8, width)
    plain = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    ddp(x).pow(2).mean().backward()
    plain.step()
    zero.step()
    flat = torch.cat([p.detach().reshape(-1) for p in ddp.parameters()])
    out = {
        "parameter bytes": sum(p.numel() * p.element_size() for p in ddp.parameters()),
        "plain Adam state bytes": _state_bytes(plain),
        "ZeRO state bytes": _state_bytes(zero.optim),
        "params identical on all ranks": _same_everywhere(flat),
    }
    del zero, plain
    gc.collect()
    return out


# ------------------------------------------------------------------------------ 6. snapshots, resume
def epoch_batches(epoch: int, rank: int = 0, steps: int = 3, size: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The batches of one epoch for one rank: a function of (epoch, rank) only, so a resumed job sees
    exactly the data the interrupted one would have seen (the 'data position' is the epoch)."""
    gen = torch.Generator().manual_seed(10_000 * epoch + rank)
    return [(torch.randn(size, 4, generator=gen), torch.randn(size, 2, generator=gen)) for _ in range(steps)]


def new_training(seed: int = 0) -> tuple[Any, Any]:
    """A model and an optimizer with state (SGD with momentum: its buffers matter when resuming)."""
    model = make_model(seed=seed)
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_epochs(
    model: Any,
    optimizer: Any,
    epochs: Sequence[int],
    rank: int = 0,
    before_step: Callable[[int, int], None] | None = None,
    after_epoch: Callable[[int], None] | None = None,
    first_step: int = 0,
) -> None:
    """Train `model` (plain or DDP) on `epoch_batches(e, rank)` for each epoch e in `epochs`; the
    torchrun script hooks its crash and its stop on SIGTERM (`before_step(epoch, step)`) and its
    snapshot (`after_epoch(epoch)`) into the same loop that the uninterrupted reference runs.
    `first_step` steps of the first epoch are skipped: they were done before a mid-epoch snapshot."""
    from torch import nn

    first_step = positive_int("first_step", first_step, minimum=0)
    for number, epoch in enumerate(epochs):
        for step, (x, y) in enumerate(epoch_batches(epoch, rank)):
            if number == 0 and step < first_step:
                continue
            if before_step is not None:
                before_step(epoch, step)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        if after_epoch is not None:
            after_epoch(epoch)


def uninterrupted(rank: int, world_size: int, epochs: int = 4) -> list[float]:
    """In each rank: what `resumable_train.py` computes when nothing goes wrong (same model, optimizer,
    data and loop, under DDP); the final parameters, flat."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model, optimizer = new_training()
    train_epochs(DDP(model), optimizer, range(positive_int("epochs", epochs)), rank)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def save_snapshot(path: str | os.PathLike[str], model: Any, optimizer: Any, epoch: int, step: int = 0) -> None:
    """Write a snapshot after `epoch` finished: write a temporary file, then rename it over the old one.
    `os.replace` is atomic, so a process killed while writing leaves the previous snapshot intact.
    `step`: the steps of the next epoch already done, for a snapshot taken mid-epoch (on SIGTERM)."""
    model = getattr(model, "module", model)  # a DDP wrapper: save the model inside (no "module." keys)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch, "step": step}
    tmp = f"{os.fspath(path)}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_snapshot(path: str | os.PathLike[str], model: Any, optimizer: Any) -> int:
    """Load a snapshot into `model` and `optimizer` (both states) and return the epoch to continue with:
    the one after the last finished epoch, or 0 when there is no snapshot yet."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, weights_only=True)
    getattr(model, "module", model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"]) + 1


def snapshot_step(path: str | os.PathLike[str]) -> int:
    """The steps of the epoch to continue with that a mid-epoch snapshot (taken on SIGTERM) had already
    done: 0 without a snapshot, or for one written at the end of an epoch."""
    if not os.path.exists(path):
        return 0
    return int(torch.load(path, weights_only=True).get("step", 0))


def resume_run(resume: Callable[..., Any], epochs: int = 4, stop_after: int = 1) -> dict[str, Any]:
    """The resume experiment in one process: an uninterrupted run of `epochs` epochs against one that
    stops after epoch `stop_after` (snapshot), then continues with a fresh model and optimizer (other
    seed) from `start = resume(path, model, optimizer)`. Reports whether the final weights are equal."""
    reference, ref_opt = new_training()
    train_epochs(reference, ref_opt, range(epochs))
    with tempfile.TemporaryDirectory(prefix="snapshot-") as tmp:
        path = os.path.join(tmp, "snapshot.pt")
        first, first_opt = new_training()
        train_epochs(first, first_opt, range(stop_after + 1))
        save_snapshot(path, first, first_opt, stop_after)
        model, optimizer = new_training(seed=99)  # a restarted process starts from scratch
        start = resume(path, model, optimizer)
        loaded_model = all(torch.equal(a, b) for a, b in zip(model.parameters(), first.parameters(), strict=True))
        loaded_optimizer = bool(optimizer.state) and all(
            torch.equal(optimizer.state[a]["momentum_buffer"], first_opt.state[b]["momentum_buffer"])
            for a, b in zip(model.parameters(), first.parameters(), strict=True)
            if a in optimizer.state and b in first_opt.state
        )
        if isinstance(start, int) and not isinstance(start, bool) and 0 <= start <= epochs:
            train_epochs(model, optimizer, range(start, epochs))
        same = all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters(), strict=True))
    return {"start": start, "loaded model": loaded_model, "loaded optimizer": loaded_optimizer, "bitwise equal": same}


# ------------------------------------------------------------------------------------- torchrun jobs
@dataclass
class ResumableJob:
    """One run of `resumable_train.py`: each rank's events (every attempt), rank 0's final parameters,
    the normalised root cause if the job failed, and its wall time."""

    events: list[list[dict[str, Any]]]  # per rank, in order: start, epoch done, kill, ...
    final: torch.Tensor | None  # rank 0's parameters at the end, flat; None if the job did not finish
    failure: str  # "" when the job succeeded
    seconds: float


def torchrun_job(
    epochs: int = 4,
    *,
    kill: tuple[int, int, int] | None = None,
    fail: tuple[int, int] | None = None,
    preempt: tuple[int, int, int] | None = None,
    snapshots: str | os.PathLike[str] | None = None,
    max_restarts: int = 1,
    nproc: int = 2,
    env: dict[str, str | None] | None = None,
    timeout: float = 90.0,
) -> ResumableJob:
    """`torchrun --standalone --nproc-per-node nproc --max-restarts max_restarts resumable_train.py`,
    through the course's launcher (loopback only, `TMPDIR` in a folder removed afterwards).

    `kill=(rank, epoch, step)`: that rank kills itself with SIGKILL at that step of the first attempt.
    `fail=(rank, epoch)`: that rank raises an exception there (in every attempt).
    `preempt=(rank, epoch, step)`: that rank sends SIGTERM to torchrun there, as a scheduler would, in a
    job that started without a snapshot. `snapshots`: the folder of the snapshot (default: the job's own,
    removed with it), so that a second job can resume from the first's. torchrun's own output (run ids,
    ports, times, pids) is not returned, only the root cause of a failure, normalised."""
    epochs = positive_int("epochs", epochs)
    max_restarts = positive_int("max_restarts", max_restarts, minimum=0)
    args = ["{results}", str(epochs)]
    for flag, fault, size in (("kill", kill, 3), ("fail", fail, 2), ("preempt", preempt, 3)):
        if fault is None:
            continue
        if not isinstance(fault, tuple) or len(fault) != size:
            raise TypeError(f"{flag} must be a tuple of {size} ints, got {fault!r}")
        args += [f"--{flag}", ",".join(str(positive_int(flag, n, minimum=0)) for n in fault)]
    if snapshots is not None:
        if not os.path.isdir(snapshots):
            raise ValueError(f"snapshots must be an existing folder, got {snapshots!r}")
        args += ["--snapshots", os.fspath(snapshots)]
    job = _launcher.torchrun_standalone(
        SCRIPT,
        args,
        nproc,
        options=[f"--max-restarts={max_restarts}"],
        timeout=timeout,
        env={"OMP_NUM_THREADS": "1", **(env or {})},
        failures="report",
    )
    ranks = sorted(job.results, key=lambda row: row["RANK"])
    final = next((row["final"] for row in ranks if row.get("final") is not None), None)
    return ResumableJob(
        events=[row["events"] for row in ranks],
        final=torch.tensor(final, dtype=torch.float32) if final is not None else None,
        failure=root_cause(job.output) if job.returncode else "",
        seconds=job.seconds,
    )


def crash_and_resume(epochs: int = 4, kill: tuple[int, int, int] = (1, 2, 1)) -> dict[str, ResumableJob]:
    """The uninterrupted job and the one whose rank `kill[0]` is killed mid-epoch, one after the other."""
    return {
        "uninterrupted": torchrun_job(epochs, max_restarts=0),
        "killed and resumed": torchrun_job(epochs, kill=kill, max_restarts=1),
    }


def preempted_job(epochs: int = 4, preempt: tuple[int, int, int] = (1, 2, 1)) -> dict[str, ResumableJob]:
    """A preemption and a requeue, with the snapshot kept between the two jobs: in the first, rank
    `preempt[0]` sends SIGTERM to torchrun at step `preempt[2]` of epoch `preempt[1]`, as a scheduler
    would; torchrun forwards it to every worker, the ranks stop together at that step, rank 0 writes a
    mid-epoch snapshot, and torchrun ends. The second job is the same command again: it resumes there."""
    with tempfile.TemporaryDirectory(prefix="preempted-") as snapshots:
        stopped = torchrun_job(epochs, preempt=preempt, snapshots=snapshots, max_restarts=0)
        requeued = torchrun_job(epochs, snapshots=snapshots, max_restarts=0)
    return {"preempted": stopped, "requeued": requeued}


def failing_job(epochs: int = 3, fail: tuple[int, int] = (1, 1)) -> ResumableJob:
    """A job whose rank `fail[0]` raises in epoch `fail[1]`, without restarts: torchrun's summary names
    the root cause from the error file that `@record` wrote."""
    return torchrun_job(epochs, fail=fail, max_restarts=0)


_ROOT = re.compile(r"Root Cause \(first observed failure\):(.*?)(?:\n=+|\Z)", re.S)
_OTHERS = re.compile(r"Failures:\n(.*?)\n-{5,}", re.S)
_BLOCK = re.compile(r"^\[\d+\]:\n", re.M)
_FOLLOW_ON = ("closed by peer", "reset by peer")  # gloo's words for "another rank went away"
_SIGNALLED = re.compile(r"SignalException: Process \S+ got signal: (\d+)")


def _failure(block: str) -> tuple[str, bool]:
    """One failure of torchrun's summary as stable text, and whether it only followed another rank's."""
    rank = re.search(r"rank\s*:\s*(\d+)", block)
    code = re.search(r"exitcode\s*:\s*(-?\d+)", block)
    trace = block.split("traceback", 1)[1] if "traceback" in block else ""
    error = error_line(trace)
    signal_name = re.search(r"Signal (\d+) \((SIG\w+)\)", block)
    parts = [f"rank {rank.group(1)}" if rank else "rank ?"]
    if code and (signal_name or not error):  # the exit code of a rank that raised races (see above)
        parts.append(f"exit code {code.group(1)}")
    if error:
        parts.append(error)
    elif "To enable traceback" in trace:
        parts.append("no traceback (the script does not use @record)")
    if signal_name:
        parts.append(f"killed by {signal_name.group(2)}")
    return ", ".join(p for p in parts if p), any(words in error for words in _FOLLOW_ON)


def root_cause(summary: str) -> str:
    """torchrun's failure summary reduced to what is stable: the failing rank and the last line of its
    traceback (from the error file `@record` writes), or its exit code or signal when there is no
    traceback; times, hosts, pids, paths go. With a traceback the exit code is left out: the agent may
    have ended the failing rank with SIGTERM (-15) before it exited by itself (1), whichever came first.
    torchrun's "first observed failure" compares timestamps in whole seconds and takes the first rank
    of a tie, so a rank that failed only because its peer was gone ("Connection closed by peer") can be
    named instead of the peer: such a follow-on is passed over for another rank's own error. When the
    agent itself got a signal (SIGTERM, SIGHUP, ...), there is no summary: that signal is named."""
    if not isinstance(summary, str):
        raise TypeError(f"summary must be a str, got {type(summary).__name__}")
    match = _ROOT.search(summary)
    signalled = _SIGNALLED.search(summary)
    if match is None and signalled is not None:  # the agent's own SignalException: no worker failed
        return f"torchrun itself got {signal.Signals(int(signalled.group(1))).name} (SignalException)"
    if match is None:
        return error_line(summary) or "no root cause in the output"
    root, follow_on = _failure(match.group(1))
    others = _OTHERS.search(summary)
    if follow_on and others:
        for block in _BLOCK.split(others.group(1))[1:]:
            text, also_follow_on = _failure(block)
            if not also_follow_on:
                return text
    return root


# ------------------------------------------------------------------------- 8. launching from a notebook
def pickled_by_reference(fn: Callable[..., Any], timeout: float = 120.0) -> str:
    """Pickle `fn` here and unpickle it in a fresh interpreter, as a spawn child does with its target: a
    function pickles as a reference (module and name), so one defined in a notebook's `__main__` is not
    found there. Returns what the child says, cleaned.

    Unpickling imports `fn`'s module, as spawn does: well under a second for a module without torch, about
    2 s of CPU for one that imports torch, and over 20 s of wall time was seen for that on a 2-core machine
    running `make test` with one core kept busy. `timeout` only ends a child that never answers."""
    import pickle

    non_negative("timeout", timeout)
    payload = pickle.dumps(fn)
    steps = [
        "import pickle, sys",
        "fn = pickle.loads(sys.stdin.buffer.read())",
        "print(f'found {fn.__module__}.{fn.__name__}')",
    ]
    code = "; ".join(steps)
    try:
        done = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"no answer from the child within {timeout:g} s"
    if done.returncode == 0:
        return done.stdout.decode().strip()
    return error_line(done.stderr.decode()) or f"exit code {done.returncode}"


# ----------------------------------------------------------------------------------- bench figures
def _gradient_mib(width: int) -> float:
    """MiB of fp32 gradients of `accumulation_timing`'s model, counted from the model itself."""
    model = make_model(width=width, depth=HEAVY["depth"], inputs=width, outputs=width)
    return sum(p.numel() for p in model.parameters()) * 4 / 2**20


def no_sync_saving(k: int = 4, steps: int = 2, repeats: int = 5, width: int = HEAVY["width"]) -> Any:
    """Optimizer steps per second of `k`-step accumulation with `no_sync` over the same without it, 2 ranks
    x 1 thread on the communication-heavy model (median of `repeats` alternations): a bench figure."""
    from helpers.timing import Figure, measure_load

    options = {"accumulation_timing": {"k": k, "steps": steps, "repeats": repeats, "width": width}}
    with measure_load() as load:
        results = launch([accumulation_timing], 2, kwargs=options, timeout=300)
    times = step_times(results)
    return Figure(
        ratio=times["plain"].median / times["no_sync"].median,
        limit=float(k),
        floor=1.3,
        what=f"{k}-step accumulation, 2 ranks, {_gradient_mib(width):.0f} MiB of gradients: "
        "steps/s with no_sync / without",
        details={
            "s_per_step_plain": times["plain"].median,
            "s_per_step_no_sync": times["no_sync"].median,
            "relative_range_plain": times["plain"].relative_range,
            "relative_range_no_sync": times["no_sync"].relative_range,
            "start_method": default_start_method(),
            "load": load.result.as_dict() if load.result else {},
        },
    )


def restart_overhead(epochs: int = 4) -> Any:
    """Wall time of the torchrun job whose rank 1 is killed mid-job and resumed from its snapshot, over the
    same job uninterrupted (no floor), the restart's own time beside it: a bench figure."""
    from helpers.timing import Figure

    jobs = crash_and_resume(epochs)
    plain, resumed = jobs["uninterrupted"], jobs["killed and resumed"]
    ok = plain.final is not None and resumed.final is not None and torch.equal(plain.final, resumed.final)
    return Figure(
        ratio=resumed.seconds / plain.seconds,
        limit=None,
        what="torchrun job, 2 ranks, one SIGKILLed mid-job and resumed / uninterrupted: wall time",
        details={
            "uninterrupted_s": plain.seconds,
            "killed_and_resumed_s": resumed.seconds,
            "restart_s": restart_seconds(resumed),
            "final_weights_bitwise_equal": ok,
        },
        conditions={"final weights equal": ok},
    )


def restart_seconds(job: ResumableJob) -> float | None:
    """From the kill to the moment every rank of the next attempt has joined its group."""
    killed = [row["time"] for rows in job.events for row in rows if row.get("event") == "kill"]
    joined = [row["time"] for rows in job.events for row in rows if row.get("event") == "start" and row["attempt"] > 0]
    if not killed or not joined:
        return None
    return max(joined) - min(killed)
