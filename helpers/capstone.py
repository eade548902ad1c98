"""Notebook 08, the capstone: one training job that is slow for several reasons at once, the timers that
show where its time goes, and each fix as one field of a `Config`, so that the notebook can change one
cause at a time and re-measure.

The job: `SlowDataset` is map-style; every sample waits (an I/O-like read), then decodes its record in
pure Python (a checksum pass that holds the GIL), then draws a random augmentation from a generator
stored on the dataset in `__init__`. `train(ORIGINAL)` runs it the way a first draft often does:
`num_workers=0`, batches of 8, a loss `.item()` and a log line every step, a loader re-created each
epoch, and no per-worker reseeding of the stored generator (DataLoader workers reseed torch, `random`
and NumPy's global generator, not one stored on the dataset). Its main process runs at 1 thread in
every version, the original included, so that the versions compare the data fixes alone: the thread
count is a setting the notebook measures on its own (`step_seconds`), not one of the fixes.

The exercise's job (`SecondJob`, `train_second`) is slow for another reason: a pure-Python per-row
standardisation in the main process, which DataLoader workers cannot take over.

Everything that crosses a process boundary (the datasets, `reseed_augment`, the DDP rank function) lives
here, so the notebook runs under fork, spawn and forkserver.
"""

from __future__ import annotations

import contextlib
import gc
import io
import math
import re
import struct
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import psutil
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, get_worker_info

from helpers.environment import default_start_method, usable_cores
from helpers.errors import captured_stderr
from helpers.threads import torch_threads
from helpers.validate import non_negative, positive_int

__all__ = [
    "FEATURES",
    "CLASSES",
    "TARGET_ACCURACY",
    "SlowDataset",
    "reseed_augment",
    "make_model",
    "test_set",
    "Config",
    "Run",
    "ORIGINAL",
    "train",
    "steps_plan",
    "step_seconds",
    "profile_step",
    "cpu_per_process",
    "ddp_rank",
    "train_ddp",
    "READINGS",
    "RawDataset",
    "slow_prepare",
    "SecondJob",
    "SecondRun",
    "train_second",
    "capstone_speedup",
]

FEATURES = 16
CLASSES = 4
TARGET_ACCURACY = 80.0  # percent on the clean test set, for the sample budget of `Config.samples`
_SEPARATION = 0.6  # scale of the class prototypes against unit noise


def _prototypes(seed: int) -> torch.Tensor:
    """The class centres of the synthetic task: one row per class, fixed by the seed."""
    return torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(seed)) * _SEPARATION


def _record(seed: int, index: int, prototypes: torch.Tensor) -> tuple[bytes, int]:
    """The stored "file" of one sample: its features quantised to 16-bit ints, then a checksum."""
    rng = np.random.default_rng([seed, index])
    label = int(rng.integers(CLASSES))
    values = prototypes[label].numpy() + rng.standard_normal(FEATURES)
    ints = np.clip(np.round(values * 1000), -32768, 32767).astype("<i2")
    payload = ints.tobytes()
    return payload + struct.pack("<I", _checksum(payload, 1)), label


def _checksum(payload: bytes, passes: int) -> int:
    """An Adler-style checksum in pure Python, `passes` times over the bytes: real CPU work that holds
    the GIL, like a hand-written parser or a decoder without a C extension."""
    a, b = 1, 0
    for _ in range(passes):
        for byte in payload:
            a = (a + byte) % 65521
            b = (b + a) % 65521
    return (b << 16) | a


def _decode(record: bytes, passes: int) -> list[float]:
    """Verify and unpack one record (the checksum runs `passes` times: the decode's CPU cost)."""
    payload, stored = record[:-4], struct.unpack("<I", record[-4:])[0]
    if _checksum(payload, 1) != stored:
        raise ValueError("corrupt record: checksum mismatch")
    if passes > 1:
        _checksum(payload, passes - 1)
    return [v / 1000.0 for v in struct.unpack(f"<{FEATURES}h", payload)]


class SlowDataset(Dataset):
    """Map-style, slow to read: each sample waits `wait` s (I/O-like: no CPU), decodes in pure Python
    (`passes` checksum passes), and is augmented from `self.rng`.

    The generator is built once, in `__init__` (the mistake the notebook fixes): every DataLoader worker
    gets a copy in the same state, so without `reseed_augment` the workers repeat each other's "random"
    augmentations. A sample is `(features, label, draw)`; `draw` is the augmentation's random scale, so
    a run can count how many distinct augmentations it saw.
    """

    def __init__(self, n: int = 512, seed: int = 0, wait: float = 0.0015, passes: int = 12) -> None:
        self.n = positive_int("n", n)
        self.seed = positive_int("seed", seed, minimum=0)
        self.wait = non_negative("wait", wait)
        self.passes = positive_int("passes", passes)
        self.prototypes = _prototypes(self.seed)
        self.rng = np.random.default_rng(self.seed)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, float]:
        if not 0 <= index < self.n:
            raise IndexError(f"index {index} out of range for {self.n} samples")
        if self.wait:
            time.sleep(self.wait)
        record, label = _record(self.seed, index, self.prototypes)
        values = _decode(record, self.passes)
        draw = float(self.rng.standard_normal())
        shift = self.rng.standard_normal(FEATURES) * 0.2
        x = torch.tensor(values, dtype=torch.float32) * (1.0 + 0.1 * draw) + torch.from_numpy(shift).float()
        return x, label, draw


def reseed_augment(worker_id: int) -> None:
    """worker_init_fn: give this worker's copy of the dataset its own generator, from the worker's seed
    (`base_seed + worker_id`, base_seed drawn from the DataLoader's generator: reproducible when that
    generator is seeded, different per worker and per epoch)."""
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)


def make_model(seed: int = 0, width: int = 256) -> nn.Module:
    """An MLP whose step is not free (two hidden layers `width` wide), the same for every run of a seed."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(FEATURES, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, CLASSES)
    )


def test_set(seed: int = 0, n: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean samples from the training distribution (new indices, no augmentation), for the accuracy."""
    prototypes = _prototypes(seed)
    rng = np.random.default_rng([seed, 10**9])
    labels = torch.from_numpy(rng.integers(CLASSES, size=n))
    noise = torch.from_numpy(rng.standard_normal((n, FEATURES))).float()
    return prototypes[labels] + noise, labels


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean()) * 100.0


@dataclass(frozen=True)
class Config:
    """One version of the job. The defaults are the original job; each fix changes one field.

    `main_threads=0` means one thread per usable core. `samples` is the budget: every version
    trains on the same number of samples (`samples // n` epochs over an `n`-sample dataset).
    """

    num_workers: int = 0
    persistent_workers: bool = False
    main_threads: int = 1
    batch_size: int = 8
    lr: float = 0.01
    log_every: int = 1  # a loss .item() and a log line every this many steps
    reseed: bool = False  # worker_init_fn=reseed_augment
    n: int = 512
    samples: int = 1024
    seed: int = 0
    wait: float = 0.0015
    passes: int = 12
    start_method: str | None = None  # the workers' multiprocessing_context; None: the platform default

    def __post_init__(self) -> None:
        positive_int("num_workers", self.num_workers, minimum=0)
        positive_int("main_threads", self.main_threads, minimum=0)
        positive_int("batch_size", self.batch_size)
        positive_int("log_every", self.log_every)
        positive_int("n", self.n)
        positive_int("samples", self.samples)
        if self.samples % self.n or self.n % self.batch_size:
            raise ValueError(
                f"samples ({self.samples}) must be whole epochs of n ({self.n}), and n whole batches of "
                f"batch_size ({self.batch_size})"
            )
        if not isinstance(self.lr, (int, float)) or isinstance(self.lr, bool) or not 0 < self.lr < math.inf:
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        if self.persistent_workers and not self.num_workers:
            raise ValueError("persistent_workers=True needs num_workers > 0 (DataLoader raises otherwise)")
        non_negative("wait", self.wait)
        if self.start_method not in (None, "fork", "spawn", "forkserver"):
            raise ValueError(f"start_method must be None, 'fork', 'spawn' or 'forkserver', got {self.start_method!r}")

    @property
    def epochs(self) -> int:
        return self.samples // self.n

    def dataset(self) -> SlowDataset:
        return SlowDataset(n=self.n, seed=self.seed, wait=self.wait, passes=self.passes)


ORIGINAL = Config()


@dataclass
class Run:
    """What one run of the job measured. Times are wall-clock seconds in the main process."""

    config: Config
    seconds: float  # the whole job, loaders' start-up included
    cpu: float  # CPU seconds of the main process (all its threads) in the job; workers not included
    samples: int  # samples that reached the model
    accuracy: float  # percent, clean test set
    data_wait: float  # time spent waiting in next(iterator) (and iter(loader): worker start-up)
    compute: float  # forward, backward, step, and the per-step logging
    first_batch: float  # iter(loader) to the first batch, summed over epochs (start-up)
    distinct_draws: int  # distinct augmentation draws among all samples seen
    log_lines: int
    warnings: list[str] = field(default_factory=list)  # first lines of torch's warnings, counts removed

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds

    @property
    def limit(self) -> float:
        """How much faster this run could be if its main process did all its CPU work spread over every
        usable core and never waited (meaningful for `num_workers=0`, where all the work is in it)."""
        return self.seconds / (self.cpu / usable_cores())

    @property
    def wait_share(self) -> float:
        """The fraction of the job's time spent waiting for data."""
        return self.data_wait / self.seconds


def _loader(config: Config, dataset: Dataset) -> DataLoader:
    kwargs: dict[str, Any] = {"batch_size": config.batch_size, "shuffle": True}
    kwargs["generator"] = torch.Generator().manual_seed(config.seed)
    if config.num_workers:
        kwargs.update(num_workers=config.num_workers, persistent_workers=config.persistent_workers)
        kwargs["multiprocessing_context"] = config.start_method
        if config.reseed:
            kwargs["worker_init_fn"] = reseed_augment
    return DataLoader(dataset, **kwargs)


def _warning_line(message: str) -> str:
    """A torch warning's first sentence with its numbers removed (they quote this machine's cores)."""
    return re.sub(r"\d+", "N", str(message).strip().split(". ")[0])


def _threads(n: int) -> contextlib.AbstractContextManager[None]:
    """torch at `n` threads for a block (0: one per usable core, the job's default), then the caller's count."""
    return torch_threads(n or usable_cores())


def train(config: Config = ORIGINAL, progress: Callable[[int], None] | None = None) -> Run:
    """Train the job once on `config.samples` samples and time where the main process's time went.

    The original re-creates the loader each epoch, as a loop written `for epoch ...: loader =
    DataLoader(...)` does; with `persistent_workers` one loader serves every epoch. Torch's warning about
    more workers than usable cores is caught and returned in `Run.warnings` (a notebook prints it on
    purpose: on stderr its text would differ per machine). `progress(samples_so_far)` is called after
    each step, e.g. by `cpu_per_process`.
    """
    if not isinstance(config, Config):
        raise TypeError(f"config must be a capstone.Config, got {type(config).__name__}")
    dataset = config.dataset()
    test_x, test_y = test_set(config.seed)
    model = make_model(config.seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    loss_fn = nn.CrossEntropyLoss()
    log = io.StringIO()
    seen = steps = 0
    wait = compute = first = 0.0
    draws: set[float] = set()
    with warnings.catch_warnings(record=True) as caught, _threads(config.main_threads):
        warnings.simplefilter("always")
        start, cpu = time.perf_counter(), time.process_time()
        loader = _loader(config, dataset)
        for epoch in range(config.epochs):
            if epoch and not config.persistent_workers:
                loader = _loader(config, dataset)  # the mistake: a new loader (and new workers) every epoch
            t0 = time.perf_counter()
            batches = iter(loader)
            for i, (x, y, draw) in enumerate(batches):
                t1 = time.perf_counter()
                wait += t1 - t0
                first += t1 - t0 if i == 0 else 0.0
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                steps += 1
                seen += len(y)
                draws.update(draw.tolist())
                if steps % config.log_every == 0:
                    print(f"epoch {epoch} step {steps} loss {loss.item():.4f}", file=log)
                t0 = time.perf_counter()
                compute += t0 - t1
                if progress is not None:
                    progress(seen)
            del batches
        del loader
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        accuracy = _accuracy(model, test_x, test_y)
    notes = sorted({_warning_line(w.message) for w in caught if issubclass(w.category, UserWarning)})
    return Run(
        config=config,
        seconds=seconds,
        cpu=cpu,
        samples=seen,
        accuracy=accuracy,
        data_wait=wait,
        compute=compute,
        first_batch=first,
        distinct_draws=len(draws),
        log_lines=len(log.getvalue().splitlines()),
        warnings=notes,
    )


def steps_plan(cores: int | None = None, start_method: str | None = None) -> list[tuple[str, Config]]:
    """The fixes in the order the measurements suggest, each a change to the previous version.

    Workers first (the data wait dominates), then, while the wait still dominates, more workers than
    cores (the workers wait on I/O for part of each sample, so one worker per core leaves the cores
    partly idle); then keep them (start-up per epoch), bigger batches with the learning rate scaled with
    them (fewer per-step overheads; accuracy on the same budget), log less often, and reseed the stored
    generator (a correctness fix: distinct augmentations). The main process runs at 1 thread throughout
    (`Config.main_threads`). `start_method` is the workers' start method in every version (None: the
    platform default).
    """
    cores = usable_cores() if cores is None else positive_int("cores", cores)
    plan = [("original", replace(ORIGINAL, start_method=start_method))]
    changes: list[tuple[str, dict[str, Any]]] = [
        ("num_workers=cores", {"num_workers": cores}),
        ("num_workers=2 x cores", {"num_workers": 2 * cores}),
        ("persistent_workers=True", {"persistent_workers": True}),
        ("batch 32, lr x4", {"batch_size": 32, "lr": ORIGINAL.lr * 4}),
        ("log every 50 steps", {"log_every": 50}),
        ("reseed in worker_init_fn", {"reseed": True}),
    ]
    for label, change in changes:
        plan.append((label, replace(plan[-1][1], **change)))
    return plan


def step_seconds(threads: int, steps: int = 40, batch_size: int = 8, budget: float = 1.5) -> float:
    """Median seconds of one training step of the job's model at `threads` torch threads (0: all usable
    cores), on a fixed batch: what the main process's thread count costs, apart from the data. Stops
    after `budget` seconds (at least one step): on a busy machine a multi-threaded step can be slow."""
    positive_int("steps", steps)
    budget = non_negative("budget", budget)
    model = make_model(0)
    optimizer = torch.optim.SGD(model.parameters(), lr=ORIGINAL.lr)
    x, y = test_set(0, n=positive_int("batch_size", batch_size))
    times = []
    with _threads(positive_int("threads", threads, minimum=0)):
        for _ in range(steps):
            t0 = time.perf_counter()
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            times.append(time.perf_counter() - t0)
            if sum(times) > budget:
                break
    return sorted(times)[len(times) // 2]


def profile_step(config: Config = ORIGINAL, rows: int = 8) -> str:
    """torch.profiler over one batch's load and one step of `config`'s job: the top `rows` entries of
    the table sorted by CPU time, with the load and the step marked by `record_function`."""
    from torch.profiler import ProfilerActivity, profile, record_function

    dataset = config.dataset()
    model = make_model(config.seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    # the profiler's C++ side logs its start and stop to fd 2 with a timestamp: keep it out of the notebook
    with captured_stderr(), _threads(config.main_threads), profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("load one batch (num_workers=0)"):
            items = [dataset[i] for i in range(config.batch_size)]
            x = torch.stack([item[0] for item in items])
            y = torch.tensor([item[1] for item in items])
        with record_function("training step"):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    return prof.key_averages().table(sort_by="cpu_time_total", row_limit=positive_int("rows", rows))


def cpu_per_process(config: Config, interval: float = 0.1) -> dict[str, float]:
    """Run the job once while sampling psutil's CPU use of the main process and of each of its child
    processes (the workers) every `interval` s; the mean percent of one core per role."""
    me = psutil.Process()
    samples: dict[str, list[float]] = {}
    stop = threading.Event()
    tracked: dict[int, psutil.Process] = {}

    def sample() -> None:
        me.cpu_percent()
        while not stop.wait(interval):
            samples.setdefault("main", []).append(me.cpu_percent())
            children = sorted(me.children(), key=lambda p: p.pid)
            for rank, child in enumerate(children):
                proc = tracked.setdefault(child.pid, child)
                try:
                    value = proc.cpu_percent()
                except psutil.Error:
                    continue
                samples.setdefault(f"worker {rank}", []).append(value)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        train(config)
    finally:
        stop.set()
        thread.join(timeout=5)
    return {role: sum(v[1:] or v) / len(v[1:] or v) for role, v in samples.items()}


# ---- DDP over the usable cores ---------------------------------------------------------------------


def ddp_rank(rank: int, world_size: int, config: dict[str, Any]) -> dict[str, Any]:
    """One DDP rank of the job: a `DistributedSampler` shard of the dataset, `num_workers=0` (the ranks
    already use every core), the global batch split over the ranks, the same sample budget in total, and
    an augmentation generator of the rank's own (each rank builds the dataset from the same seed, so
    without it the ranks would repeat each other's draws: section 3's mistake, per rank). Timed from a
    barrier after the group is up; rank 0 also reports the test accuracy."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data.distributed import DistributedSampler

    cfg = Config(**config)
    dataset = cfg.dataset()
    dataset.rng = np.random.default_rng([cfg.seed, rank])
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=cfg.seed)
    loader = DataLoader(dataset, batch_size=cfg.batch_size // world_size, sampler=sampler)
    model = DistributedDataParallel(make_model(cfg.seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    seen = 0
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        for x, y, _ in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            seen += len(y)
    dist.barrier()
    seconds = time.perf_counter() - start
    accuracy = _accuracy(model.module, *test_set(cfg.seed)) if rank == 0 else None
    return {"seconds": seconds, "samples": seen, "accuracy": accuracy}


def train_ddp(config: Config, world_size: int | None = None, timeout: float = 60.0) -> dict[str, float]:
    """The job on `world_size` DDP ranks (default: the usable cores) at 1 thread each, launched with the
    course's launcher under `config.start_method` (None: the platform default). Returns the samples/s
    in steady state, the launch's wall time (start-up included), the samples seen by all ranks and rank
    0's accuracy."""
    from helpers.launcher import launch

    world_size = usable_cores() if world_size is None else positive_int("world_size", world_size)
    if config.batch_size % world_size:
        raise ValueError(f"batch_size ({config.batch_size}) must split evenly over {world_size} ranks")
    single = replace(config, num_workers=0, persistent_workers=False, reseed=False)
    start = time.perf_counter()
    kwargs = {"ddp_rank": {"config": asdict(single)}}
    results = launch([ddp_rank], world_size, timeout=timeout, start_method=config.start_method, kwargs=kwargs)
    wall = time.perf_counter() - start
    runs = [results[r]["ddp_rank"] for r in range(world_size)]
    seconds = max(r["seconds"] for r in runs)
    samples = sum(r["samples"] for r in runs)
    return {
        "samples_per_s": samples / seconds,
        "seconds": seconds,
        "wall_with_startup": wall,
        "samples": samples,
        "accuracy": runs[0]["accuracy"],
        "world_size": world_size,
    }


# ---- the exercise's job: slow in the main process --------------------------------------------------


READINGS = 128  # raw readings of each feature in one sample of the exercise's job


class RawDataset(Dataset):
    """Cheap to read (no wait, no decode), but raw: each sample holds `READINGS` noisy readings of each
    of the `FEATURES` features, with the sample's own gain and offset (think: sensors calibrated
    differently). Preparing a batch means averaging the readings and standardising each row."""

    def __init__(self, n: int = 1024, seed: int = 1, split: str = "train") -> None:
        self.n = positive_int("n", n)
        self.seed = positive_int("seed", seed, minimum=0)
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        prototypes = _prototypes(self.seed)
        rng = np.random.default_rng([self.seed, 0 if split == "train" else 1])
        labels = torch.from_numpy(rng.integers(CLASSES, size=self.n))
        clean = prototypes[labels] + torch.from_numpy(rng.standard_normal((self.n, FEATURES))).float()
        noise = torch.from_numpy(rng.standard_normal((self.n, READINGS, FEATURES))).float()
        readings = clean.unsqueeze(1) + 0.5 * noise
        gain = torch.from_numpy(rng.uniform(0.2, 10.0, size=(self.n, 1, 1))).float()
        offset = torch.from_numpy(rng.uniform(-20.0, 20.0, size=(self.n, 1, 1))).float()
        self.x = (readings * gain + offset).reshape(self.n, READINGS * FEATURES)
        self.y = labels

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def slow_prepare(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Average each feature's readings, then standardise each row (mean 0, standard deviation 1), in
    pure Python in the main process: the exercise's bottleneck."""
    rows = []
    for raw in x.tolist():
        row = [sum(raw[r * FEATURES + f] for r in range(READINGS)) / READINGS for f in range(FEATURES)]
        mean = sum(row) / FEATURES
        std = math.sqrt(sum((v - mean) ** 2 for v in row) / (FEATURES - 1))
        rows.append([(v - mean) / std for v in row])
    return torch.tensor(rows), y


@dataclass(frozen=True)
class SecondJob:
    """The exercise's job as the learner may change it: `prepare(x, y) -> (x, y)` runs in the main
    process on every batch, `num_workers` DataLoader workers read the samples."""

    prepare: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] = slow_prepare
    num_workers: int = 0

    def __post_init__(self) -> None:
        if not callable(self.prepare):
            raise TypeError(f"prepare must be a function (x, y) -> (x, y), got {type(self.prepare).__name__}")
        positive_int("num_workers", self.num_workers, minimum=0)


@dataclass
class SecondRun:
    seconds: float  # wall-clock, the training loop
    cpu: float  # the main process's CPU time in the loop (all its threads; workers not included)
    prepare: float  # wall-clock seconds inside prepare
    wait: float  # wall-clock seconds waiting for batches
    samples: int  # rows that reached the model
    accuracy: float  # percent, on test rows put through the same prepare
    others_cpu: float = 0.0  # CPU time of other processes under this one in the loop, DataLoader workers aside


def _others_cpu() -> tuple[float, dict[int, float]]:
    """CPU seconds of this process's ended (waited-for) children, and of each live descendant by pid: a
    `prepare` that hands its work to other processes moves CPU time there instead of saving it."""
    ended = psutil.Process().cpu_times()
    live = {}
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            live[proc.pid] = t.user + t.system + t.children_user + t.children_system
    return ended.children_user + ended.children_system, live


def train_second(job: SecondJob = SecondJob(), samples: int = 2048, n: int = 1024, seed: int = 1) -> SecondRun:
    """Train the exercise's job on `samples` samples (batches of 64, the main process at 1 thread) and
    time it; the accuracy is measured on `n // 2` fresh raw rows put through the job's own `prepare`."""
    if not isinstance(job, SecondJob):
        raise TypeError(f"job must be a capstone.SecondJob, got {type(job).__name__}")
    positive_int("samples", samples)
    dataset = RawDataset(n=n, seed=seed)
    if samples % n:
        raise ValueError(f"samples ({samples}) must be whole epochs of n ({n})")
    model = make_model(seed, width=32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    kwargs: dict[str, Any] = {"batch_size": 64, "shuffle": True, "generator": torch.Generator().manual_seed(seed)}
    if job.num_workers:
        kwargs.update(num_workers=job.num_workers, persistent_workers=True)
    seen, wait, prep = 0, 0.0, 0.0
    with warnings.catch_warnings(), _threads(1):
        warnings.simplefilter("ignore", UserWarning)  # more workers than cores: not this job's point
        loader = DataLoader(dataset, **kwargs)
        gc.collect()  # an earlier run's garbage (the original's Python lists) is not this run's cost
        gc.disable()  # and, as in timeit, no collection during the timed loop
        try:
            ended0, live0 = _others_cpu()
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(samples // n):
                t0 = time.perf_counter()
                for x, y in loader:
                    t1 = time.perf_counter()
                    x, y = job.prepare(x, y)
                    t2 = time.perf_counter()
                    wait, prep = wait + t1 - t0, prep + t2 - t1
                    if len(x) != len(y):
                        raise ValueError(f"prepare returned {len(x)} rows and {len(y)} labels")
                    optimizer.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    optimizer.step()
                    seen += len(y)
                    t0 = time.perf_counter()
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            ended1, live1 = _others_cpu()
        finally:
            gc.enable()
        iterator = getattr(loader, "_iterator", None)  # persistent workers: still running, not "others"
        workers = {w.pid for w in getattr(iterator, "_workers", [])}
        others = ended1 - ended0 + sum(v - live0.get(pid, 0.0) for pid, v in live1.items() if pid not in workers)
        del loader, iterator
        test = RawDataset(n=max(1, n // 2), seed=seed, split="test")
        accuracy = _accuracy(model, *job.prepare(test.x, test.y))
    return SecondRun(
        seconds=seconds, cpu=cpu, prepare=prep, wait=wait, samples=seen, accuracy=accuracy, others_cpu=others
    )


# ---- the bench figure ------------------------------------------------------------------------------


def capstone_speedup(samples: int = 2048) -> Any:
    """The fully fixed single-process job / the original, samples/s on the same budget of `samples`,
    worker start-up included (under the default start method, named in the details; under spawn and
    forkserver each worker imports torch, which can outweigh a short job: the ratio without the time to
    the first batch is reported beside it)."""
    from helpers.timing import Figure

    plan = steps_plan()
    original = replace(plan[0][1], samples=samples)
    fixed = replace(plan[-1][1], samples=samples)
    base = train(original)
    best = train(fixed)
    # The limit: the original's wall time over its CPU time spread over every core. The fixes also cut
    # CPU work (fewer, larger steps), so a ratio can pass it; most of the gain is hiding the waits.
    return Figure(
        ratio=best.samples_per_s / base.samples_per_s,
        limit=base.limit,
        floor=2.0,
        what=f"capstone job, fixed ({fixed.num_workers} workers) / original, {samples} samples, start-up included",
        details={
            "samples_per_s_original": base.samples_per_s,
            "samples_per_s_fixed": best.samples_per_s,
            "startup_s_fixed": best.first_batch,
            "ratio_after_startup": best.samples / (best.seconds - best.first_batch) / base.samples_per_s,
            "accuracy_original_pct": base.accuracy,
            "accuracy_fixed_pct": best.accuracy,
            "start_method": default_start_method(),
        },
        conditions={
            "both reach the target accuracy": min(base.accuracy, best.accuracy) >= TARGET_ACCURACY,
            "same samples seen": base.samples == best.samples == samples,
        },
    )
