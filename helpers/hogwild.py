"""Chapter 03, Hogwild: several processes train one model in shared memory, each with its own optimizer,
data order and seed, and no lock around the updates.

Every run here goes through `hogwild()`, with one process as the baseline, so the single-process and the
multi-process numbers come from the same code. Workers never print: they write their loss per step, the
time span of every step and what they touched into shared tensors, and the parent reads those after
joining them. A shared step counter (an `mp.Value` with its lock) gives the whole run one budget of
optimizer steps, and a shared `Event` stops everyone early.
"""

from __future__ import annotations

import gc
import math
import os
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

import psutil
import torch
import torch._dynamo  # noqa: F401 - the first optimizer imports it anyway; forked workers inherit it
import torch.multiprocessing as tmp
from torch import nn
from torch.nn import functional as F

from helpers import timing
from helpers.environment import default_start_method, pinnable_cores, usable_cores
from helpers.processes import running
from helpers.threads import torch_threads
from helpers.validate import positive_int

__all__ = [
    "Task",
    "Config",
    "Run",
    "make_task",
    "make_sparse_task",
    "make_model",
    "make_sparse_model",
    "accuracy",
    "hogwild",
    "compare",
    "in_this_process",
    "Speeds",
    "speed_table",
    "conflicts",
    "momentum_buffers",
    "train_worker",
    "pinned_train_worker",
    "scaled_wait",
    "fork_breaks_autograd",
    "children_start_method",
]

_WAIT = 60.0  # seconds on an idle machine: bound for the start barrier and for joining (spawn imports torch)


def scaled_wait(demand: float) -> float:
    """`_WAIT`, stretched by how oversubscribed the machine is: (1-minute load average + the `demand` in
    threads we are about to add) / usable cores, at least 1. At load 4 on 2 cores with 2 workers: 180 s.
    A run that is merely slow must not be reported as hung."""
    return _WAIT * max(1.0, (psutil.getloadavg()[0] + demand) / usable_cores())


# ---- the task and the model ----------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """Training and test data. `x` holds features (dense task) or the active feature ids (sparse task)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int
    sparse: bool = False

    def share_memory_(self) -> Task:
        """Move the data to shared memory once, so no child gets (or pickles) a copy of it."""
        for tensor in (self.x_train, self.y_train, self.x_test, self.y_test):
            tensor.share_memory_()
        return self


def make_task(n_train: int = 20_000, n_test: int = 2_000, features: int = 20, classes: int = 10, seed: int = 0) -> Task:
    """Points around 3 random centres per class, with unit noise: hard enough that accuracy climbs over a
    few thousand steps (to about 92 %), made with torch so nothing is downloaded."""
    for name, value in (("n_train", n_train), ("n_test", n_test), ("features", features)):
        positive_int(name, value)
    positive_int("classes", classes, minimum=2)
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(3 * classes, features, generator=g)
    labels = torch.arange(3 * classes) % classes
    which = torch.randint(0, 3 * classes, (n_train + n_test,), generator=g)
    x = centres[which] + torch.randn(n_train + n_test, features, generator=g)
    y = labels[which]
    return Task(x[:n_train], y[:n_train], x[n_train:], y[n_train:], classes)


def make_sparse_task(
    n_train: int = 20_000, n_test: int = 2_000, features: int = 1_000, active: int = 4, seed: int = 0
) -> Task:
    """Each sample has `active` of `features` binary features on; its class is the sign of the sum of a
    hidden weight per active feature. A step on a batch of b samples touches at most b x active rows of
    the model: the sparse problems the Hogwild! paper has in mind."""
    for name, value in (("n_train", n_train), ("n_test", n_test), ("active", active)):
        positive_int(name, value)
    positive_int("features", features, minimum=active)
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(features, generator=g)
    x = torch.randint(0, features, (n_train + n_test, active), generator=g)
    y = (weights[x].sum(1) > 0).long()
    return Task(x[:n_train], y[:n_train], x[n_train:], y[n_train:], classes=2, sparse=True)


def make_model(features: int = 20, hidden: int = 64, classes: int = 10, seed: int = 0) -> nn.Module:
    """A small MLP, built from a seed so every run starts from the same weights."""
    for name, value in (("features", features), ("hidden", hidden), ("classes", classes)):
        positive_int(name, value)
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)
    )


def make_sparse_model(features: int = 1_000, sparse: bool = True, seed: int = 0) -> nn.Module:
    """A linear model on binary features: one row of 2 logits per feature, summed over the active ones.
    With `sparse=True` a step's gradient, and so its update, covers only the rows the batch touched;
    with `sparse=False` the same gradient is a dense tensor of zeros elsewhere, and the update rewrites
    every row."""
    positive_int("features", features)
    torch.manual_seed(seed)
    model = nn.EmbeddingBag(features, 2, mode="sum", sparse=sparse)
    nn.init.zeros_(model.weight)
    return model


def accuracy(model: nn.Module, task: Task) -> float:
    """Test accuracy in percent."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(task, Task):
        raise TypeError(f"task must be a helpers.hogwild.Task, got {type(task).__name__}")
    with torch.no_grad():
        predicted = model(task.x_test).argmax(1)
    return 100.0 * (predicted == task.y_test).float().mean().item()


# ---- one run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """What every process of a run shares. `steps` is the budget for all processes together."""

    steps: int = 2_000
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    threads: int | None = 1  # torch threads per process; None keeps torch's default (all cores)
    seed: int = 0
    target_loss: float | None = None  # stop everyone once a process's recent mean loss is below it
    record_rows: bool = False  # log the rows each step touched (sparse task), for `conflicts`
    core: int | None = None  # pin every process of the run to this core (Linux); None lets the OS place them

    def __post_init__(self) -> None:
        if self.core is not None:
            positive_int("core", self.core, minimum=0)
            cores = pinnable_cores()
            if cores is None:
                raise ValueError("core needs os.sched_setaffinity, which only Linux has; leave it None here")
            if self.core not in cores:
                raise ValueError(f"core must be one of this process's cores {cores}, got {self.core}")
        positive_int("steps", self.steps)
        positive_int("batch_size", self.batch_size)
        if self.threads is not None:
            positive_int("threads", self.threads)
        for name in ("lr", "momentum"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        if self.target_loss is not None and not isinstance(self.target_loss, (int, float)):
            raise TypeError(f"target_loss must be a number or None, got {type(self.target_loss).__name__}")


@dataclass
class Run:
    """What the parent knows after joining every worker."""

    processes: int
    losses: torch.Tensor  # (processes, steps), NaN after a process's last step
    steps: list[int]  # steps each process took
    spans: torch.Tensor  # (processes, steps, 2): start and end of every step, seconds from the barrier
    rows: torch.Tensor | None  # (processes, steps, batch x active) rows touched, if recorded
    startup: float  # seconds from the first start() until every process reached the barrier
    seconds: float  # from the barrier until the last process finished its last step
    accuracy: float  # test accuracy of the shared model, evaluated in the parent after the join
    model: nn.Module
    stopped_early: bool
    batch_size: int
    start_method: str

    @property
    def samples_per_s(self) -> float:
        return self.batch_size * sum(self.steps) / self.seconds

    def curve(self) -> torch.Tensor:
        """The loss of all processes in the order the steps were taken (by end time), for plotting."""
        ends = self.spans[..., 1]
        done = ~torch.isnan(self.losses)
        order = ends[done].argsort()
        return self.losses[done][order]


def train_worker(
    rank: int,
    model: nn.Module,
    task: Task,
    config: Config,
    counter: Any,
    stop: Any,
    barrier: Any,
    log: torch.Tensor,
    spans: torch.Tensor,
    rows: torch.Tensor | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> None:
    """One Hogwild process: its own seed, data order and (unless one is handed in) optimizer; steps are
    claimed from the shared counter under its lock, so the run stops at one global budget."""
    if config.threads is not None:
        torch.set_num_threads(config.threads)  # before any torch op: a forked child would hang otherwise
    torch.manual_seed(config.seed + 1 + rank)
    order = torch.Generator().manual_seed(1_000 * config.seed + rank)
    if optimizer is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum)
    n = len(task.y_train)
    recent: list[float] = []
    barrier.wait(scaled_wait(0))
    step = 0
    while not stop.is_set():
        with counter.get_lock():
            if counter.value >= config.steps:
                break
            counter.value += 1
        start = time.monotonic()  # one clock for every process: the parent puts all on one origin
        idx = torch.randint(0, n, (config.batch_size,), generator=order)
        x = task.x_train[idx]
        loss = F.cross_entropy(model(x), task.y_train[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        value = loss.item()
        log[rank, step] = value
        spans[rank, step, 0] = start
        spans[rank, step, 1] = time.monotonic()
        if rows is not None:
            rows[rank, step] = x.reshape(-1)
        step += 1
        if config.target_loss is not None:
            recent = (recent + [value])[-50:]
            if len(recent) == 50 and sum(recent) / 50 < config.target_loss:
                stop.set()


def pinned_train_worker(rank: int, model: nn.Module, task: Task, config: Config, *args: Any) -> None:
    """`train_worker` on the one core `config.core`. Pinned here, in the child, not in the parent: a
    forkserver child is forked from the server, which does not share the parent's affinity."""
    os.sched_setaffinity(0, {config.core})
    train_worker(rank, model, task, config, *args)


def fork_breaks_autograd(devices: int | None = None) -> bool:
    """Whether a child forked from this process may fail at its first backward with "Unable to handle
    autograd's threading in combination with fork-based multiprocessing".

    The first backward in a process starts autograd's device threads (`Engine::start_device_threads` in
    torch/csrc/autograd/engine.cpp). When a registered non-CPU device guard reports at least one device,
    it starts a thread per device and arms a fork check (`track_bad_autograd_forks`, a pthread_atfork
    handler); every child forked after that refuses to run backward. So with a CUDA build on a machine
    with a GPU, one backward on *CPU* tensors in this process is enough (pytorch/pytorch#32835, #41639).
    A CPU build, or an empty `CUDA_VISIBLE_DEVICES`, reports no device: nothing is armed, fork is safe.

    The engine takes the largest count of any such device type, so Apple's MPS (one device) arms it too.
    `devices` stands in for the count (the tests pass one); by default `torch.cuda.device_count()`,
    which asks NVML and so does not initialise CUDA in this process (that would poison fork too), plus 1
    where MPS is available.
    """
    if devices is None:
        mps = getattr(torch.backends, "mps", None)
        devices = torch.cuda.device_count() + int(mps is not None and mps.is_available())
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 0:
        raise ValueError(f"devices must be a device count >= 0 or None, got {devices!r}")
    return devices > 0


def children_start_method(prefer: str | None = None, devices: int | None = None) -> str:
    """The start method for children that run backward: `prefer` (None: the platform's default), except
    that fork becomes spawn where `fork_breaks_autograd(devices)`. For cells that pick fork only because
    it starts faster; a lesson that needs fork passes start_method="fork" to `hogwild`, which refuses
    with a clear error where fork would break."""
    method = prefer or default_start_method()
    if method not in tmp.get_all_start_methods():
        raise ValueError(f"prefer must be one of {tmp.get_all_start_methods()} or None, got {prefer!r}")
    return "spawn" if method == "fork" and fork_breaks_autograd(devices) else method


def hogwild(
    processes: int = 2,
    config: Config | None = None,
    task: Task | None = None,
    model: nn.Module | None = None,
    share: bool = True,
    start_method: str | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    time_limit: float | None = None,
    timeout: float | None = None,
) -> Run:
    """Train `model` on `task` with `processes` Hogwild workers and return what the parent sees.

    `start_method` None is the platform's default, except that fork becomes spawn where it would break
    autograd (`children_start_method`); an explicit "fork" there raises `ValueError`.
    `share=False` skips `model.share_memory()` (the classic mistake); `optimizer`, if given, is built in
    the parent and handed to every worker (another one). `processes=1` is the single-process baseline,
    run by the same code. `time_limit` (seconds after the start barrier) sets the stop signal, so a slow
    configuration ends early instead of holding up a class. `timeout` bounds every wait; by default it
    grows with the machine's load (`scaled_wait`). A run that does not finish in it raises `TimeoutError`
    (a worker still running, or not at the start barrier), one whose worker fails raises `RuntimeError`.
    """
    positive_int("processes", processes)
    if time_limit is not None and (
        isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or time_limit <= 0
    ):
        raise ValueError(f"time_limit must be a number of seconds > 0 or None, got {time_limit!r}")
    config = Config() if config is None else config
    if not isinstance(config, Config):
        raise TypeError(f"config must be a helpers.hogwild.Config, got {type(config).__name__}")
    task = make_task() if task is None else task
    if not isinstance(task, Task):
        raise TypeError(f"task must be a helpers.hogwild.Task, got {type(task).__name__}")
    if model is None:
        model = make_sparse_model() if task.sparse else make_model(task.x_train.shape[1], classes=task.classes)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if config.record_rows and not task.sparse:
        raise ValueError("config.record_rows needs a sparse task (make_sparse_task)")
    task.share_memory_()
    if share:
        model.share_memory()
    ctx = tmp.get_context(children_start_method(start_method) if start_method is None else start_method)
    if timeout is None:
        timeout = scaled_wait(processes * (config.threads or torch.get_num_threads()))
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ValueError(f"timeout must be a number of seconds > 0 or None, got {timeout!r}")
    if ctx.get_start_method() == "fork" and config.threads != 1:
        raise ValueError(
            f"threads={config.threads} under fork: a forked child whose parent has run a parallel torch op hangs "
            "in GNU OpenMP (libgomp) at its first parallel op; use threads=1, or start_method='spawn' for more "
            "threads"
        )
    if ctx.get_start_method() == "fork" and fork_breaks_autograd():  # only an explicit "fork" gets here
        raise ValueError(
            "start_method='fork': this torch sees a GPU, so after any backward in this process a forked child "
            "fails at its first backward (autograd's fork check, torch/csrc/autograd/engine.cpp); start Jupyter "
            "with CUDA_VISIBLE_DEVICES= (empty) for this CPU notebook, or use start_method='spawn'"
        )
    counter, stop, barrier = ctx.Value("l", 0), ctx.Event(), ctx.Barrier(processes + 1)
    log = torch.full((processes, config.steps), math.nan).share_memory_()
    spans = torch.full((processes, config.steps, 2), math.nan, dtype=torch.float64).share_memory_()
    rows = None
    if config.record_rows:
        width = config.batch_size * task.x_train.shape[1]
        rows = torch.full((processes, config.steps, width), -1, dtype=torch.long).share_memory_()
    procs = [
        ctx.Process(
            target=train_worker if config.core is None else pinned_train_worker,
            args=(rank, model, task, config, counter, stop, barrier, log, spans, rows, optimizer),
        )
        for rank in range(processes)
    ]
    started = time.monotonic()
    try:
        with running(procs, timeout=timeout):
            _meet(barrier, procs, timeout)
            startup = time.monotonic() - started
            if time_limit is not None:
                limit = time.monotonic() + time_limit
                for proc in procs:
                    proc.join(max(0.0, limit - time.monotonic()))
                if any(proc.is_alive() for proc in procs):
                    stop.set()  # nobody waits on it, so set() cannot block; workers see it before their next step
            for proc in procs:
                proc.join(timeout)
            codes = [p.exitcode for p in procs]
            if None in codes:
                raise TimeoutError(
                    f"a Hogwild worker was still running {timeout:.0f} s after the start ({_load_now()}); "
                    "it was stopped. Re-run with fewer steps or on a less busy machine"
                )
            if any(code != 0 for code in codes):
                raise RuntimeError(f"a Hogwild worker failed (exit codes {codes})")
        stopped_early = stop.is_set()
        steps = [int((~torch.isnan(log[r])).sum()) for r in range(processes)]
        seconds = _on_one_origin(spans)
        return Run(
            processes=processes,
            losses=log.clone(),
            steps=steps,
            spans=spans.clone(),
            rows=None if rows is None else rows.clone(),
            startup=startup,
            seconds=seconds,
            accuracy=accuracy(model, task),
            model=model,
            stopped_early=stopped_early,
            batch_size=config.batch_size,
            start_method=ctx.get_start_method(),
        )
    finally:
        del counter, stop, barrier, procs
        gc.collect()  # spawn-context semaphores go when their objects do; a killed kernel would leave them


def _on_one_origin(spans: torch.Tensor) -> float:
    """Shift the steps' times (read from one monotonic clock by every process) so that 0 is the start of the
    run's first step, in place, and return the run's length: from that first start to the last end.

    One origin for all processes: had each worker timed from its own return from the start barrier, one
    that the system woke late would measure a shorter run than the wall clock saw, and the run's samples/s,
    so its speed-up, would come out too high (even above the core count)."""
    done = ~torch.isnan(spans[..., 0])
    if not bool(done.any()):
        return 0.0
    origin = spans[..., 0][done].min()
    spans -= origin
    return float(spans[..., 1][done].max())


def _meet(barrier: Any, procs: list[Any], timeout: float) -> None:
    """Join the workers at the start barrier, but give up at once if one of them died on the way (a
    plain `barrier.wait(timeout)` would sit out the whole timeout)."""
    deadline = time.monotonic() + timeout
    while barrier.n_waiting < len(procs):
        codes = [p.exitcode for p in procs]
        if any(code is not None for code in codes):
            barrier.abort()
            raise RuntimeError(f"a Hogwild worker did not reach the start barrier (exit codes {codes})")
        if time.monotonic() > deadline:
            barrier.abort()
            raise TimeoutError(f"the Hogwild workers were not all started after {timeout:.0f} s ({_load_now()})")
        time.sleep(0.002)
    barrier.wait(timeout)


def _load_now() -> str:
    return f"load average {psutil.getloadavg()[0]:.1f} on {usable_cores()} cores"


def compare(
    counts: list[int], config: Config | None = None, task: Task | None = None, start_method: str | None = None
) -> dict[int, Run]:
    """The same training (same budget of steps, same initial weights) with each number of processes in
    `counts`, one after the other in one call, so their speeds can be compared side by side."""
    if not isinstance(counts, (list, tuple)) or not counts:
        raise ValueError(f"counts must be a non-empty list of process counts, got {counts!r}")
    for count in counts:
        positive_int("counts[...]", count)
    task = make_task() if task is None else task
    return {
        n: hogwild(
            n,
            config,
            task=task,
            model=make_model(task.x_train.shape[1], classes=task.classes),
            start_method=start_method,
        )
        for n in counts
    }


def in_this_process(
    config: Config | None = None,
    task: Task | None = None,
    model: nn.Module | None = None,
    time_limit: float | None = None,
) -> Run:
    """The baseline a user would pick instead of Hogwild: one process (this one) running `train_worker`
    with `config.threads` torch threads (None: torch's default, all cores), no child at all.

    This process's torch thread count and global random state are restored afterwards. `time_limit`
    stops the loop early (an oversubscribed machine can make threads very slow); samples/s then count the
    steps taken.
    """
    config = Config(threads=None) if config is None else config
    if not isinstance(config, Config):
        raise TypeError(f"config must be a helpers.hogwild.Config, got {type(config).__name__}")
    task = make_task() if task is None else task
    if not isinstance(task, Task):
        raise TypeError(f"task must be a helpers.hogwild.Task, got {type(task).__name__}")
    model = make_model(task.x_train.shape[1], classes=task.classes) if model is None else model
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if time_limit is not None and (
        isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or time_limit <= 0
    ):
        raise ValueError(f"time_limit must be a number of seconds > 0 or None, got {time_limit!r}")
    ctx = tmp.get_context(default_start_method())
    counter, stop, barrier = ctx.Value("l", 0), ctx.Event(), ctx.Barrier(1)
    log = torch.full((1, config.steps), math.nan)
    spans = torch.full((1, config.steps, 2), math.nan, dtype=torch.float64)
    timer = threading.Timer(time_limit, stop.set) if time_limit is not None else None
    try:
        with torch.random.fork_rng(devices=[]), torch_threads():  # train_worker sets its own count
            if timer is not None:
                timer.start()
            train_worker(0, model, task, config, counter, stop, barrier, log, spans)
        stopped_early = stop.is_set()
    finally:
        if timer is not None:
            timer.cancel()
        del counter, stop, barrier
        gc.collect()
    steps = [int((~torch.isnan(log[0])).sum())]
    seconds = _on_one_origin(spans)
    return Run(
        processes=1,
        losses=log,
        steps=steps,
        spans=spans,
        rows=None,
        startup=0.0,
        seconds=seconds,
        accuracy=accuracy(model, task),
        model=model,
        stopped_early=stopped_early,
        batch_size=config.batch_size,
        start_method="none (this process)",
    )


@dataclass
class Speeds:
    """Repeated, interleaved speed runs: `runs[n]` holds one Hogwild run with n processes per round,
    `threaded` one run per round of a single process with all of `threads` torch threads (in this process),
    `load` what other programs did meanwhile."""

    runs: dict[int, list[Run]]
    threaded: list[Run]
    threads: int
    load: timing.Load | None = None
    by_core: dict[int, list[Run]] = field(default_factory=dict)  # the baseline pinned to each core, if asked
    rounds: int = field(init=False)

    def __post_init__(self) -> None:
        self.rounds = len(self.runs[1])

    def speedup(self, processes: int) -> timing.Spread:
        """Samples/s of `processes` Hogwild processes over one process at 1 thread, round by round."""
        return _ratios(self.runs[processes], self.runs[1])

    def threaded_speedup(self) -> timing.Spread:
        """Samples/s of one process with all threads over one process with 1 thread, round by round."""
        return _ratios(self.threaded, self.runs[1])

    def versus_threaded(self, processes: int) -> timing.Spread:
        """Samples/s of `processes` Hogwild processes over one process with all threads: > 1, Hogwild wins."""
        return _ratios(self.runs[processes], self.threaded)

    def fastest(self, processes: int, margin: float = 0.1) -> str:
        """The headline: which way of using this machine was fastest in these rounds, Hogwild with `processes`
        processes, one process with all `threads`, or one process at 1 thread (the baseline itself), judged
        from the medians of the round-by-round ratios to that baseline. A winner must beat the next by more
        than `margin` (10 %); otherwise no clear winner is named."""
        positive_int("processes", processes)
        if processes not in self.runs:
            raise ValueError(f"processes must be one of the measured counts {sorted(self.runs)}, got {processes}")
        options = {
            f"Hogwild ({processes} x 1 thread)": self.speedup(processes).median,
            f"1 process x {self.threads} threads": self.threaded_speedup().median,
            "1 process x 1 thread": 1.0,
        }
        (best, top), (second, runner_up) = sorted(options.items(), key=lambda kv: kv[1], reverse=True)[:2]
        if top <= (1 + margin) * runner_up:
            return f"no clear winner: {best} and {second} are within {margin:.0%} of each other"
        return f"{best} wins here, {top / runner_up:.2f}x the speed of the next ({second})"


def _ratios(top: list[Run], bottom: list[Run]) -> timing.Spread:
    """Median and range of samples/s ratios of runs taken in the same round."""
    return timing.spread(a.samples_per_s / b.samples_per_s for a, b in zip(top, bottom, strict=True))


def speed_table(
    counts: list[int],
    config: Config | None = None,
    task: Task | None = None,
    rounds: int = 3,
    threads: int | None = None,
    start_method: str | None = None,
    baseline_on_each_core: bool = False,
) -> Speeds:
    """`rounds` rounds of: Hogwild with each count in `counts` (1 thread per process) and one process with
    `threads` threads (default: all usable cores) in this process, all on the same budget from the same
    weights. Rounds are interleaved, every other one in reverse order, so a burst of load slows one round of
    every configuration instead of all runs of one; compare medians, and read the spread as the noise.

    `baseline_on_each_core=True` runs the 1-process baseline once per usable core, pinned to it (Linux),
    and keeps the fastest in `runs[1]` (all of them in `by_core`). On a virtual machine the host can slow
    one core and not the other for seconds: one process then runs at the speed of the core it lands on,
    and a ratio over it reads far above the core count when that core was the slow one (2.71 of 2, the
    median of five rounds, on an idle machine). n processes cannot run faster than n copies of the fastest
    core, so over that baseline where the process landed cannot push the ratio over n. The machine's speed
    changing from one run to the next still can, in single rounds (up to 2.43 of 2 in one bench run), so
    read the median of the rounds, not any one of them."""
    if not isinstance(counts, (list, tuple)) or 1 not in counts:
        raise ValueError(f"counts must be a list of process counts that includes 1 (the baseline), got {counts!r}")
    for count in counts:
        positive_int("counts[...]", count)
    positive_int("rounds", rounds)
    threads = usable_cores() if threads is None else threads
    positive_int("threads", threads)
    config = Config(steps=4_000) if config is None else config
    if config.threads != 1:
        raise ValueError(f"config.threads must be 1 (one thread per Hogwild process), got {config.threads!r}")
    task = make_task() if task is None else task
    if not isinstance(baseline_on_each_core, bool):
        raise TypeError(f"baseline_on_each_core must be True or False, got {baseline_on_each_core!r}")
    cores = pinnable_cores() if baseline_on_each_core else []
    if cores is None:
        raise ValueError("baseline_on_each_core needs os.sched_setaffinity, which only Linux has")
    runs: dict[int, list[Run]] = {n: [] for n in counts}
    by_core: dict[int, list[Run]] = {core: [] for core in cores}
    threaded: list[Run] = []
    threaded_config = Config(**{**config.__dict__, "threads": threads})

    def run(n: int, cfg: Config) -> Run:
        model = make_model(task.x_train.shape[1], classes=task.classes)
        return hogwild(n, cfg, task=task, model=model, start_method=start_method)

    with timing.measure_load() as load:
        for round_ in range(rounds):
            # Every other round in reverse order: a run that benefits from coming first or last in a round
            # (a warm cache, the CPU's boost clock settling) does so for every configuration in turn.
            for n in counts if round_ % 2 == 0 else list(reversed(counts)):
                if n == 1 and cores:
                    for core in cores:
                        by_core[core].append(run(1, replace(config, core=core)))
                    runs[1].append(max((by_core[core][-1] for core in cores), key=lambda r: r.samples_per_s))
                else:
                    runs[n].append(run(n, config))
            # On a busy machine OpenMP threads can crawl (they spin waiting for each other): stop at twice
            # the time of the 1-thread run; samples/s then count the steps taken.
            limit = 0.5 + 2 * runs[1][-1].seconds
            threaded.append(in_this_process(threaded_config, task=task, time_limit=limit))
    return Speeds(runs=runs, threaded=threaded, threads=threads, load=load.result, by_core=by_core)


# ---- collisions ----------------------------------------------------------------------------------


def conflicts(run: Run, dense: bool) -> dict[str, float]:
    """Share of steps that ran at the same time as another process's step (`overlapping`), and of those
    that also touched a row the other step touched (`conflicting`: one update was computed from
    parameters the other was changing). In a dense model every step touches every parameter, so each
    overlap is a conflict."""
    if not isinstance(run, Run):
        raise TypeError(f"run must be a helpers.hogwild.Run, got {type(run).__name__}")
    if not dense and run.rows is None:
        raise ValueError("this run did not record rows: use Config(record_rows=True) on a sparse task")
    total = overlapping = conflicting = 0
    for a in range(run.processes):
        for i in range(run.steps[a]):
            start, end = run.spans[a, i].tolist()
            hit_time = hit_rows = False
            for b in range(run.processes):
                if b == a or run.steps[b] == 0:
                    continue
                other = run.spans[b, : run.steps[b]]
                together = ((other[:, 0] < end) & (other[:, 1] > start)).nonzero().flatten()
                if len(together) == 0:
                    continue
                hit_time = True
                if dense:
                    hit_rows = True
                else:
                    mine = run.rows[a, i]
                    theirs = run.rows[b, together].flatten()
                    hit_rows = hit_rows or bool(torch.isin(mine, theirs).any())
                if hit_rows:
                    break
            total += 1
            overlapping += hit_time
            conflicting += hit_rows
    if total == 0:
        raise ValueError("the run took no steps")
    return {"steps": total, "overlapping": overlapping / total, "conflicting": conflicting / total}


# ---- optimizer state -----------------------------------------------------------------------------


def momentum_buffers(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """What the parent's optimizer holds after a run: how many parameters have a momentum buffer, whether
    those live in shared memory, and their total size (0 when the workers' momentum never came back)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    buffers = [s["momentum_buffer"] for s in optimizer.state.values() if s.get("momentum_buffer") is not None]
    return {
        "buffers": len(buffers),
        "shared": bool(buffers) and all(b.is_shared() for b in buffers),
        "norm": float(sum(b.detach().norm() ** 2 for b in buffers) ** 0.5) if buffers else 0.0,
    }
