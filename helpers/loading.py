"""Chapter 01, DataLoader workers: datasets, measurements and the timeline recorder.

Every dataset and `worker_init_fn` here may be sent to spawn workers, which import this module by name;
none of them can be defined in the notebook. Samples that record timings carry them inside the sample
(worker id, start and end time), so recording needs no shared state and costs two clock reads.
"""

from __future__ import annotations

import gc
import math
import os
import random
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from helpers.environment import pinned
from helpers.validate import non_negative, positive_int

__all__ = [
    "SleepyDataset",
    "BusyDataset",
    "TorchAugmentDataset",
    "WhoAmIDataset",
    "EpochStampDataset",
    "StoredRngDataset",
    "reseed_stored_rng",
    "RangeStream",
    "ShardedRangeStream",
    "shard_bounds",
    "FailingDataset",
    "SlowSampleDataset",
    "MemoryProbeDataset",
    "Timeline",
    "record_timeline",
    "Throughput",
    "measure_throughput",
    "sweep",
    "epoch_start_costs",
    "worker_memory",
    "first_error",
    "SeedStoredDataset",
    "torch_generator_on_dataset",
    "TensorHoldingDataset",
    "spawn_dataset_sharing",
    "pin_memory_without_accelerator",
    "catch_warnings",
    "SkipBadSamples",
    "collate_skipping_none",
    "aborted_epoch",
    "aborted_epoch_in_private_tmp",
    "BlasDataset",
    "limit_blas_threads",
    "blas_epoch_seconds",
]


def _worker_id() -> int:
    """-1 in the main process, the worker's id inside a DataLoader worker."""
    info = get_worker_info()
    return -1 if info is None else info.id


# ---- datasets that cost time ----------------------------------------------------------------------


class SleepyDataset(Dataset):
    """I/O-bound: each sample waits `delay` seconds (a disk or network read) and uses no CPU.

    With `record=True` each sample is a dict that also carries who loaded it and when, for timelines.
    """

    def __init__(self, n: int = 64, delay: float = 0.01, record: bool = False) -> None:
        self.n = positive_int("n", n)
        self.delay = non_negative("delay", delay)
        self.record = bool(record)

    def __len__(self) -> int:
        return self.n

    def load(self, index: int) -> torch.Tensor:
        time.sleep(self.delay)
        return torch.full((8,), float(index))

    def __getitem__(self, index: int) -> Any:
        if not 0 <= index < self.n:
            raise IndexError(f"index {index} out of range for {self.n} samples")
        if not self.record:
            return self.load(index)
        start = time.time()
        data = self.load(index)
        return {"data": data, "index": index, "worker": _worker_id(), "start": start, "end": time.time()}


def python_augment(index: int, work: int) -> float:
    """Pure-Python per-sample work (think: parsing, tokenising, a hand-written augmentation)."""
    x = float(index % 97)
    for i in range(work):
        x = (x * 1.000001 + i % 13) % 1000.0
    return x


class BusyDataset(SleepyDataset):
    """CPU-bound in Python: each sample runs `work` iterations of a pure-Python loop (holds the GIL)."""

    def __init__(self, n: int = 64, work: int = 20_000, record: bool = False) -> None:
        super().__init__(n=n, delay=0.0, record=record)
        self.work = positive_int("work", work, minimum=0)

    def load(self, index: int) -> torch.Tensor:
        return torch.full((8,), python_augment(index, self.work))


class TorchAugmentDataset(SleepyDataset):
    """CPU-bound in torch: each sample is a 3x512x512 image put through `passes` rounds of elementwise
    colour augmentation (scale, shift, clamp, sigmoid, sqrt).

    These ops are large enough for torch to split over all of the main process's threads when
    `num_workers=0`, so workers have less left to add than for Python work: the comparison the bench
    reports.
    """

    def __init__(self, n: int = 64, passes: int = 3, size: int = 512, record: bool = False) -> None:
        super().__init__(n=n, delay=0.0, record=record)
        self.passes = positive_int("passes", passes)
        self.size = positive_int("size", size)

    def load(self, index: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(index)
        image = torch.rand(3, self.size, self.size, generator=g)
        for _ in range(self.passes):
            image = torch.sigmoid((image * 1.1 + 0.05).clamp_(0, 1).sub_(0.5).mul_(2.0)).sqrt_()
        return image[:, 0, :8].reshape(-1)[:8]


# ---- datasets that show what a worker is -----------------------------------------------------------


class WhoAmIDataset(Dataset):
    """Each sample reports the process that loaded it and its torch thread count."""

    def __init__(self, n: int = 8) -> None:
        self.n = positive_int("n", n)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, int]:
        return {"index": index, "pid": os.getpid(), "worker": _worker_id(), "threads": torch.get_num_threads()}


class EpochStampDataset(WhoAmIDataset):
    """Stamps samples with `self.epoch`, which the training loop updates between epochs.

    Workers hold a *copy* of the dataset made when they started: persistent workers never see updates.
    """

    def __init__(self, n: int = 4) -> None:
        super().__init__(n)
        self.epoch = 0

    def __getitem__(self, index: int) -> dict[str, int]:
        return {**super().__getitem__(index), "epoch": self.epoch}


class StoredRngDataset(Dataset):
    """A "random augmentation" drawn from a NumPy generator stored on the dataset (a common pattern).

    Each sample also reports draws from the RNGs torch reseeds per worker (torch, `random`, NumPy's
    global one), to show which ones differ between workers without any help.
    """

    def __init__(self, n: int = 8, seed: int = 0) -> None:
        self.n = positive_int("n", n)
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {
            "index": index,
            "worker": _worker_id(),
            "augment": int(self.rng.integers(1000)),
            "torch": int(torch.randint(1000, ())),
            "random": random.randrange(1000),
            "numpy_global": int(np.random.randint(1000)),
        }


def reseed_stored_rng(worker_id: int) -> None:
    """worker_init_fn: give each worker's copy of the dataset its own generator.

    `get_worker_info().seed` is `base_seed + worker_id`, and base_seed is drawn from the DataLoader's
    `generator` each time workers start: different per worker, reproducible with a seeded generator.
    Workers start at every `iter(loader)`, so the seed is new each epoch; with `persistent_workers=True`
    they start once, this runs once per worker, and each generator simply continues across epochs.
    """
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)


class RangeStream(IterableDataset):
    """Yields 0..n-1. Every worker runs the whole `__iter__`, so with W workers each item comes W times."""

    def __init__(self, n: int = 8) -> None:
        self.n = positive_int("n", n, minimum=0)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))


def shard_bounds(n: int, worker_id: int, num_workers: int) -> tuple[int, int]:
    """The contiguous slice [start, end) of n items that worker `worker_id` of `num_workers` owns."""
    positive_int("n", n, minimum=0)
    positive_int("num_workers", num_workers)
    positive_int("worker_id", worker_id, minimum=0)
    if worker_id >= num_workers:
        raise ValueError(f"worker_id must be < num_workers ({num_workers}), got {worker_id}")
    per_worker = math.ceil(n / num_workers)
    start = min(n, worker_id * per_worker)
    return start, min(n, start + per_worker)


class ShardedRangeStream(RangeStream):
    """Yields 0..n-1 exactly once across all workers: each worker takes its own slice.

    `bounds(n, worker_id, num_workers)` computes the slice; the exercise passes its own function.
    """

    def __init__(self, n: int = 8, bounds: Callable[[int, int, int], tuple[int, int]] = shard_bounds) -> None:
        super().__init__(n)
        self.bounds = bounds

    def __iter__(self) -> Iterator[int]:
        info = get_worker_info()
        if info is None:  # num_workers=0: the main process yields everything
            return iter(range(self.n))
        start, end = self.bounds(self.n, info.id, info.num_workers)
        return iter(range(start, end))


# ---- datasets that fail ------------------------------------------------------------------------------


class FailingDataset(Dataset):
    """Sample `bad` raises, as a corrupt file would."""

    def __init__(self, n: int = 8, bad: int = 3) -> None:
        self.n = positive_int("n", n)
        self.bad = positive_int("bad", bad, minimum=0)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        if index == self.bad:
            raise ValueError(f"sample {index} is corrupt")
        return index


class SlowSampleDataset(FailingDataset):
    """Sample `bad` takes `delay` seconds (a stalled network read); the others are instant."""

    def __init__(self, n: int = 8, bad: int = 2, delay: float = 3.0) -> None:
        super().__init__(n, bad)
        self.delay = non_negative("delay", delay)

    def __getitem__(self, index: int) -> int:
        if index == self.bad:
            time.sleep(self.delay)
        return index


class MemoryProbeDataset(Dataset):
    """Holds `size` floats as a Python list or as a NumPy array; sample i reads *all* of them in worker i
    and reports that worker's unique memory (USS) before and after.

    Reading a Python object writes its reference count, so a forked worker's copy-on-write pages holding
    the list's objects get copied one by one: the worker's private memory grows toward the list's size.
    An array is one block of raw numbers; reading it writes nothing.
    """

    def __init__(self, size: int = 2_000_000, kind: str = "list") -> None:
        positive_int("size", size)
        if kind not in ("list", "array"):
            raise ValueError(f"kind must be 'list' or 'array', got {kind!r}")
        self.kind = kind
        self.values: Any = [float(i) for i in range(size)] if kind == "list" else np.arange(size, dtype=np.float64)

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> dict[str, float]:
        process = psutil.Process()
        before = process.memory_full_info().uss
        total = 0.0
        if self.kind == "list":
            for value in self.values:  # what a training loop over list items does, one by one
                total += value
        else:
            total = float(self.values.sum())
        after = process.memory_full_info().uss
        return {"worker": _worker_id(), "uss_before": float(before), "uss_after": float(after), "total": total}


# ---- measurements -----------------------------------------------------------------------------------


# _COLLECT: a DataLoader iterator's queues sit in reference cycles, so `del` alone leaves their
# semaphores (named files in /dev/shm under spawn) alive until the garbage collector happens to run, and
# they leak if the kernel is killed first. Every function here that ends an iterator with workers collects
# at once. Without workers there are no queues, and a collection (about 60 ms with torch loaded) is skipped:
# a test that timed 200 loaders without workers spent most of its 20 s of CPU collecting.


@dataclass
class Timeline:
    """What happened while the main loop consumed `batches` batches."""

    num_workers: int
    spans: list[tuple[int, int, float, float]]  # (batch, worker, start, end) seconds since iter()
    consumed: list[tuple[int, float]]  # (batch, when the main loop received it)
    first_batch: float  # seconds from iter() to the first batch (start-up)
    total: float  # seconds from iter() to the last batch consumed and processed

    @property
    def consumed_in_order(self) -> bool:
        order = [batch for batch, _ in self.consumed]
        return order == sorted(order)


def record_timeline(
    num_workers: int,
    batches: int = 12,
    batch_size: int = 4,
    delay: float = 0.01,
    step: float = 0.02,
    prefetch_factor: int | None = None,
    multiprocessing_context: Any = None,
) -> Timeline:
    """Run an I/O-bound loader and a main loop that "trains" `step` seconds per batch; record both sides.

    Workers stamp each sample; the main loop stamps each batch when it arrives. All times are wall-clock
    (`time.time()`), comparable across processes on one machine.
    """
    positive_int("num_workers", num_workers, minimum=0)
    positive_int("batches", batches)
    positive_int("batch_size", batch_size)
    non_negative("step", step)
    dataset = SleepyDataset(n=batches * batch_size, delay=delay, record=True)
    kwargs: dict[str, Any] = {"batch_size": batch_size}
    if num_workers:
        kwargs.update(num_workers=num_workers, prefetch_factor=prefetch_factor or 2)
        kwargs["multiprocessing_context"] = multiprocessing_context
    loader = DataLoader(dataset, **kwargs)
    spans, consumed = [], []
    t0 = time.time()
    first = None
    total = 0.0
    iterator = iter(loader)
    try:
        for batch_index, batch in enumerate(iterator):
            now = time.time() - t0
            first = now if first is None else first
            consumed.append((batch_index, now))
            spans.append(
                (
                    batch_index,
                    int(batch["worker"][0]),
                    float(batch["start"].min()) - t0,
                    float(batch["end"].max()) - t0,
                )
            )
            time.sleep(step)  # the training step: the main process is busy, workers keep loading
            total = time.time() - t0  # the last batch processed; the clean-up below is not the loader's time
    finally:
        del iterator
        if num_workers:
            gc.collect()  # see _COLLECT
    return Timeline(num_workers, spans, consumed, first or 0.0, total)


@dataclass
class Throughput:
    """Samples per second once running, and the start-up before the first batch, for one setting."""

    num_workers: int
    startup: float  # seconds from iter() to the first batch
    samples_per_s: float  # after the first batch; the median of `rounds` when a sweep repeated the setting
    batches: int
    rounds: tuple[float, ...] = ()  # samples/s of each round of a repeated sweep, in the order measured
    # samples/s had each process loaded without a pause, at the pace of its own timed samples (their start
    # and end stamps): what the windows cannot exceed, since a window holds all of its process's samples
    unpaused_samples_per_s: float = math.nan


class _Stamped(Dataset):
    """Wraps a dataset so that each sample carries the wall-clock instants its loading started and ended
    (`time.time_ns()` is one clock for every process of a machine) and the id of the worker that loaded it
    (-1: the main process). Integer nanoseconds, not `time.time()`'s float seconds: near 1.7e9 s a float
    resolves only about 0.24 us, so a sample that loads faster read as taking no time at all (a dataset that
    returns its index divided by zero in 6 of 200 measurements)."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[Any, int, int, int]:
        start = time.time_ns()
        sample = self.dataset[index]
        return sample, start, time.time_ns(), _worker_id()


def measure_throughput(
    dataset: Dataset,
    num_workers: int,
    batch_size: int = 4,
    batches: int | None = None,
    step: Callable[[Any], Any] | None = None,
    multiprocessing_context: Any = None,
) -> Throughput:
    """Consume the loader once. Start-up is the time to the first batch; throughput is the steady state.

    Steady state is timed from the samples themselves, not from when batches reach the main loop. The
    first two rounds (one batch per worker each) are left out: a worker's first batch is slow (a fresh
    process, first calls). Each worker's rate is its timed samples over its own window, from the start of
    its first timed sample to the end of its last; the loader's rate is the sum over the workers. A window
    holds all of one process's timed work and nothing that process did before it, so with equal work per
    sample no worker can beat one process, and the ratio to `num_workers=0` cannot exceed the number of
    workers. Timing from the arrival of the k-th batch instead (as this function did) counts work that
    other workers did before the clock started: workers start one after another, and prefetching lets an
    early worker run up to `prefetch_factor` batches ahead of a late one (seen: 3.23 of a possible 2 in
    notebook 01, 8.06 of 8 in the bench). One window for all the workers would instead charge their
    offset from each other. A worker started 0.3 s late, 12 batches timed: 2.07 of 2 with the arrival
    clock, 0.95 with one window, 1.5 with a window per worker (the early worker then really stalls,
    waiting for its next index, until the late one catches up): a transient, which a longer run dilutes.

    Without workers and without a `step`, the time is the sum of the samples' own loading times: the main
    process then also does the loader's bookkeeping between samples (sampling indices, collating, handing
    batches over), work that with workers runs beside the loading, so a window would charge the baseline
    for work the workers' windows leave out (seen: 8.05 of 8 for sleeping workers). With a `step`, the
    main process's work is part of what is measured: the baseline is timed by its window too.
    """
    return _measure(_stamped_loader(dataset, num_workers, batch_size, multiprocessing_context), batches, step)


def _stamped_loader(
    dataset: Dataset, num_workers: int, batch_size: int, multiprocessing_context: Any = None, persistent: bool = False
) -> DataLoader:
    positive_int("num_workers", num_workers, minimum=0)
    positive_int("batch_size", batch_size)
    kwargs: dict[str, Any] = {"batch_size": batch_size, "drop_last": True}
    if num_workers:
        kwargs.update(
            num_workers=num_workers, multiprocessing_context=multiprocessing_context, persistent_workers=persistent
        )
    return DataLoader(_Stamped(dataset), **kwargs)


def _measure(loader: DataLoader, batches: int | None, step: Callable[[Any], Any] | None) -> Throughput:
    """One epoch of `loader` (see `measure_throughput`); with persistent workers, those of the last epoch."""
    num_workers, batch_size = loader.num_workers, loader.batch_size
    total = len(loader.dataset) // batch_size  # type: ignore[arg-type,operator]
    per_round = max(1, num_workers)
    warmup = 2 * num_workers if num_workers else 1
    batches = total if batches is None else positive_int("batches", batches)
    if not warmup + per_round <= batches <= total:
        raise ValueError(
            f"batches must be between {warmup + per_round} (two rounds of one batch per worker, plus one"
            f" round timed) and {total} (the dataset's full batches), got {batches}"
        )
    timed = (batches - warmup) // per_round * per_round  # whole rounds only
    t0 = time.perf_counter()
    iterator = iter(loader)
    windows: dict[int, list[int]] = {}  # worker -> [first start, last end, samples, loading], in ns
    try:
        startup = 0.0
        for i in range(warmup + timed):
            batch, start, end, worker = next(iterator)
            if i == 0:
                startup = time.perf_counter() - t0
            if i >= warmup:
                first, last = int(start.min()), int(end.max())  # int64 tensors: exact, unlike a float
                w = windows.setdefault(int(worker[0]), [first, last, 0, 0])
                w[0], w[1] = min(w[0], first), max(w[1], last)
                w[2], w[3] = w[2] + len(start), w[3] + int((end - start).sum())
            if step is not None:
                step(batch)
    finally:
        del iterator
        if num_workers:
            gc.collect()  # see _COLLECT
    if any(loading == 0 for *_, loading in windows.values()):
        raise ValueError(
            "the dataset's samples load faster than this machine's clock can time them (the timed samples of one"
            " process took 0 ns in all): give each sample more work, or a larger batch_size"
        )
    unpaused = sum(samples / loading for _, _, samples, loading in windows.values()) * 1e9
    if num_workers == 0 and step is None:
        rate = unpaused
    else:
        rate = sum(samples / (last - first) for first, last, samples, _ in windows.values()) * 1e9
    return Throughput(num_workers, startup, rate, warmup + timed, unpaused_samples_per_s=unpaused)


def sweep(
    dataset: Dataset,
    workers: Sequence[int],
    batch_size: int = 4,
    batches: int | None = None,
    step: Callable[[Any], Any] | None = None,
    progress: bool = True,
    rounds: int = 1,
    before_round: Callable[[], int | None] | None = None,
) -> list[Throughput]:
    """`measure_throughput` for each worker count, with a progress bar.

    A run of CPU-bound work lasts well under a second here, and one such run can be far off even on an
    idle machine, so `rounds` repeats the whole sweep, the worker
    counts taking turns within each round so that a burst of other work hits them all; each result is
    then the median round, with every round kept in `rounds`.
    A sweep goes past the core count on purpose, so DataLoader's warning about it is silenced here.
    Each worker count starts its workers once: the rounds reuse them (`persistent_workers`), since under
    spawn every start costs a fresh interpreter importing torch (seconds), which the rounds would
    otherwise pay again and again without measuring anything new. The start-up reported is the first
    round's, the one with fresh workers.
    `before_round`, if given, is called before each round and once after the last (a probe of the
    machine, as the bench's `dataloader_cpu` makes); the core it returns, if any, is where that round's
    `num_workers=0` run is pinned.
    """
    if not workers:
        raise ValueError("workers must list at least one worker count")
    if len(set(workers)) != len(workers):
        raise ValueError(f"workers must list each worker count once, got {list(workers)}")
    positive_int("rounds", rounds)
    from tqdm.auto import tqdm

    # tqdm's default lock includes a multiprocessing RLock: under spawn, a named semaphore that lives as
    # long as the kernel and stays in /dev/shm if the kernel is killed. A thread lock is all a bar needs.
    tqdm.set_lock(threading.RLock())
    plan = [n for _ in range(rounds) for n in workers]
    runs: dict[int, list[Throughput]] = {n: [] for n in workers}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        loaders = {n: _stamped_loader(dataset, n, batch_size, persistent=rounds > 1) for n in workers}
        try:
            core = None
            for i, n in enumerate(tqdm(plan, desc="num_workers", disable=not progress, leave=False)):
                if before_round is not None and i % len(workers) == 0:
                    core = before_round()
                with pinned(core if n == 0 else None):  # workers start unpinned: their loaders' first run
                    runs[n].append(_measure(loaders[n], batches, step))
            if before_round is not None:
                before_round()
        finally:
            del loaders  # persistent workers end with their loader
            gc.collect()  # see _COLLECT
    return [_median_round(runs[n]) for n in workers]


def _median_round(runs: list[Throughput]) -> Throughput:
    """The run with the median throughput (the lower middle one for an even count), all rounds attached,
    and the first round's start-up (later rounds of a sweep reuse its workers)."""
    if len(runs) == 1:
        return runs[0]
    middle = sorted(runs, key=lambda r: r.samples_per_s)[(len(runs) - 1) // 2]
    return replace(middle, startup=runs[0].startup, rounds=tuple(r.samples_per_s for r in runs))


def epoch_start_costs(
    persistent: bool, epochs: int = 3, num_workers: int = 2, n: int = 4
) -> tuple[list[float], list[set[int]], list[list[int]]]:
    """Per epoch: seconds to the first batch, the worker PIDs that served it, and the epoch stamps
    the workers put on the samples (the loop sets `dataset.epoch` before each epoch)."""
    positive_int("epochs", epochs)
    positive_int("num_workers", num_workers)
    dataset = EpochStampDataset(n=n)
    loader = DataLoader(dataset, batch_size=1, num_workers=num_workers, persistent_workers=persistent)
    first_batch, pids, stamps = [], [], []
    try:
        for epoch in range(epochs):
            dataset.epoch = epoch
            t0 = time.perf_counter()
            seen_pids, seen_stamps = set(), []
            for i, batch in enumerate(loader):
                if i == 0:
                    first_batch.append(time.perf_counter() - t0)
                seen_pids.add(int(batch["pid"][0]))
                seen_stamps.append(int(batch["epoch"][0]))
            pids.append(seen_pids)
            stamps.append(seen_stamps)
    finally:
        loader._iterator = None  # persistent workers end with their iterator
    return first_batch, pids, stamps


def data_bytes(values: Any) -> int:
    """Bytes a list of floats or an array occupies: the list's pointer table plus every float object."""
    if isinstance(values, np.ndarray):
        return int(values.nbytes)
    return sys.getsizeof(values) + sum(sys.getsizeof(v) for v in values)


def worker_memory(kind: str, size: int = 2_000_000, num_workers: int = 2) -> dict[str, float]:
    """MB of private memory (USS) each forked worker gained by reading the whole dataset once, next to
    the MB the data occupies in the parent."""
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        raise RuntimeError("copy-on-read is a fork effect; this platform has no fork")
    positive_int("num_workers", num_workers)
    dataset = MemoryProbeDataset(size=size, kind=kind)
    data_mb = data_bytes(dataset.values) / 2**20
    loader = DataLoader(
        dataset,
        batch_size=None,
        num_workers=num_workers,
        sampler=range(num_workers),
        multiprocessing_context="fork",
    )
    grown = {}
    for sample in loader:
        grown[f"worker {sample['worker']}"] = (sample["uss_after"] - sample["uss_before"]) / 2**20
    return {"the data (parent)": data_mb, **dict(sorted(grown.items()))}


def first_error(loader: DataLoader, drain_seconds: float = 10.0) -> tuple[str, str, bool]:
    """Iterate `loader` until it raises; return (first line, last line, whether the message carries the
    worker's traceback). No worker outlives the call.

    After the error the rest of the epoch is read (for at most `drain_seconds`), so that the workers have
    sent every batch before they are told to stop. A worker stopped in the middle of an epoch may still
    have a batch on its way: its queue's feeder thread shares the batch's tensors in C++ with the GIL
    released. A spawn worker ends by finalizing the interpreter, and up to Python 3.13 a daemon thread
    that takes the GIL back during finalization is ended with `pthread_exit`; unwinding that C++ frame
    calls `std::terminate` (from 3.14 the thread is left blocked instead: python/cpython#87135). The
    worker prints "terminate called without an active exception" and dies of SIGABRT, and DataLoader's
    handler then raises "worker ... killed by signal: Aborted" in the parent (in 288 such loaders under
    spawn, 21 workers aborted and 7 of the aborts reached the parent; fork and forkserver workers leave
    with `os._exit` and never finalize).

    Then the iterator is shut down, as DataLoader itself does when an epoch ends. A failed iterator sits
    in a reference cycle, so `del` alone leaves it to the garbage collector, which runs the finalizers of
    its index queues (stopping their feeder threads) before the iterator's `__del__`: the shutdown message
    then never reaches the workers, and each is terminated only after DataLoader's join times out (5 s
    each, `MP_STATUS_CHECK_INTERVAL`; seen: 10 s for 2 workers).
    """
    from helpers.errors import short_error

    non_negative("drain_seconds", drain_seconds)
    iterator = iter(loader)
    found: tuple[str, str, bool] | None = None
    try:
        for _ in iterator:
            pass
    except Exception as exc:  # noqa: BLE001 - any error a worker raises is what we want to show
        found = short_error(exc), short_error(exc, line="last"), "Original Traceback" in str(exc)
        _drain(iterator, drain_seconds)
    shutdown = getattr(iterator, "_shutdown_workers", None)  # absent when num_workers=0
    if shutdown is not None:
        shutdown()
    del iterator
    gc.collect()  # see _COLLECT
    if found is None:
        raise AssertionError("the loader finished without an error")
    return found


def _drain(iterator: Iterator[Any], seconds: float) -> None:
    """Read what is left of an epoch that has already failed, ignoring its further errors, until it ends
    or `seconds` pass (a sample that never arrives must not hold the caller)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            next(iterator)
        except StopIteration:
            return
        except Exception:  # noqa: BLE001, S112 - the first error is already kept; the rest are read past
            continue


class _GeneratorDataset(Dataset):
    """Stores a torch.Generator on the dataset: under spawn or forkserver with the `file_descriptor` sharing
    strategy (Linux's default), its state cannot reach the workers (pytorch/pytorch#146828)."""

    def __init__(self) -> None:
        self.generator = torch.Generator().manual_seed(0)

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return int(torch.randint(1000, (), generator=self.generator))


class SeedStoredDataset(Dataset):
    """The first workaround for pytorch/pytorch#146828: store a seed, build the torch.Generator in the
    process that uses it (on first use, so in each worker), seeded per worker from `get_worker_info()`."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)
        self.generator: torch.Generator | None = None

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        if self.generator is None:
            info = get_worker_info()
            self.generator = torch.Generator().manual_seed(self.seed if info is None else info.seed)
        return int(torch.randint(1000, (), generator=self.generator))


def torch_generator_on_dataset(
    multiprocessing_context: str = "spawn", sharing_strategy: str | None = None, store_seed: bool = False
) -> list[int]:
    """Load a dataset that stores a torch.Generator (or, with `store_seed`, only a seed) with one worker.

    Run it under the watchdog: spawn workers that cannot unpickle the dataset die printing their error,
    which the watchdog captures (one worker, so that no two tracebacks interleave). `sharing_strategy`
    ("file_system", the second workaround) is set in this process, the one that pickles the dataset.
    """
    if sharing_strategy is not None:
        import torch.multiprocessing as tmp

        tmp.set_sharing_strategy(sharing_strategy)
    dataset = SeedStoredDataset() if store_seed else _GeneratorDataset()
    loader = DataLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context=multiprocessing_context)
    return list(loader)


class TensorHoldingDataset(Dataset):
    """Holds one tensor; each sample reports whether the worker's tensor lives in shared memory.

    Pickled for a spawn worker, the tensor goes through torch's reducer (`torch/multiprocessing/
    reductions.py`), which moves its storage to shared memory and sends a handle; NumPy arrays and
    Python objects have no such reducer and are pickled by value, a copy per worker.
    """

    def __init__(self, n: int = 2) -> None:
        self.n = positive_int("n", n)
        self.tensor = torch.zeros(1000)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> bool:
        return self.tensor.is_shared()


def spawn_dataset_sharing() -> dict[str, bool]:
    """Under spawn, how a dataset's tensor and array reach one worker, and what happens to the parent's."""
    dataset = TensorHoldingDataset()
    before = dataset.tensor.is_shared()
    # every sample is read, so that the worker has sent all it loaded before it stops (see `first_error`)
    sample = list(DataLoader(dataset, batch_size=None, num_workers=1, multiprocessing_context="spawn"))[0]
    gc.collect()  # see _COLLECT
    return {
        "parent's tensor shared before": before,
        "worker's tensor in shared memory": bool(sample),
        "parent's tensor shared after": dataset.tensor.is_shared(),
    }


def pin_memory_without_accelerator(dataset: Dataset) -> tuple[list[str], bool, bool]:
    """Start a loader with `pin_memory=True` and one worker: the warnings it gave, whether the iterator
    pins at all (`_pin_memory`), and whether it started a pin-memory thread (`_pin_memory_thread`).

    On CPU-only torch the DataLoader warns and pins nothing, so no thread is started; with an
    accelerator the iterator starts a thread in the main process that copies each batch into pinned
    memory. Private attributes, read only to show it. The whole epoch is read, so that the worker has
    sent every batch before it stops (see `first_error`).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        iterator = iter(DataLoader(dataset, batch_size=2, num_workers=1, pin_memory=True))
        for _batch in iterator:
            pass
    pins, thread = bool(iterator._pin_memory), hasattr(iterator, "_pin_memory_thread")  # noqa: SLF001
    del iterator
    gc.collect()  # see _COLLECT
    return [str(w.message) for w in caught], pins, thread


def catch_warnings(fn: Callable[[], Any]) -> list[str]:
    """Run fn and return the messages of the warnings it raised (in order)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught]


# ---- an epoch aborted by one bad sample, and the usual remedy -----------------------------------------


class SkipBadSamples(Dataset):
    """Wrap a dataset so that a sample whose loading raises one of `errors` becomes None instead of
    ending the epoch: the usual remedy for a few corrupt files. Pair it with `collate_skipping_none`.

    Only the errors named are caught (by default ValueError and OSError, what a corrupt or missing file
    raises), so that a bug in the loading code still stops the run. Count the skipped samples in the
    main process (`collate_skipping_none` sends the count with each batch): each worker holds its own copy
    of this object, so a count kept here would never reach the training loop."""

    def __init__(self, dataset: Dataset, errors: tuple[type[BaseException], ...] = (ValueError, OSError)) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset must be a torch Dataset, got {type(dataset).__name__}")
        if (
            not isinstance(errors, tuple)
            or not errors
            or not all(isinstance(e, type) and issubclass(e, Exception) for e in errors)
        ):
            raise TypeError(f"errors must be a non-empty tuple of exception classes, got {errors!r}")
        self.dataset = dataset
        self.errors = errors

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        try:
            return self.dataset[index]
        except self.errors:
            return None


def collate_skipping_none(batch: list[Any]) -> tuple[Any, int]:
    """collate_fn: drop the samples marked bad (None), collate the rest with torch's default, and return
    `(batch, skipped)`. The count travels with the batch to the main process, where the training loop
    adds it up: a count kept on the dataset would stay in each worker's own copy. A batch of bad samples
    only becomes `(None, skipped)`, which the loop skips."""
    from torch.utils.data import default_collate

    if not isinstance(batch, list):
        raise TypeError(f"batch must be a list of samples, got {type(batch).__name__}")
    kept = [sample for sample in batch if sample is not None]
    return (default_collate(kept) if kept else None), len(batch) - len(kept)


def _run_epoch(loader: DataLoader) -> None:
    """A training loop's epoch, the plain way: `for batch in loader`."""
    for _batch in loader:
        pass


def aborted_epoch(num_workers: int = 2, interval: float = 0.5, start_method: str | None = None) -> dict[str, float]:
    """An epoch that one bad sample ends, written the plain way, and how long the loader then takes to
    shut its workers down. Run it under the watchdog: it lowers DataLoader's join timeout.

    The failed iterator is not exhausted, and it sits in a reference cycle, so nothing ends its workers
    until the garbage collector runs. The collector finalizes the iterator's index queues first: each
    finalizer tells the queue's feeder thread to finish, so the "stop" message that the iterator's
    shutdown then puts on them is queued behind that end mark and never sent. So `_shutdown_workers`
    (torch/utils/data/dataloader.py) waits out its join timeout for every worker,
    `MP_STATUS_CHECK_INTERVAL` (5 s, in torch/utils/data/_utils/__init__.py), and terminates it; a
    terminated worker leaves its `pymp-*` folder behind. Here that timeout is `interval` instead, so
    the wait is short and its cause shows: about `num_workers * interval` seconds. `start_method` is the
    workers' (None: the platform's default)."""
    import torch.utils.data._utils as data_utils

    positive_int("num_workers", num_workers)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval <= 5:
        raise ValueError(f"interval must be a number of seconds in (0, 5], got {interval!r}")
    data_utils.MP_STATUS_CHECK_INTERVAL = interval  # read by the shutdown at every call: join(timeout=...)
    context = torch.multiprocessing.get_context(start_method) if start_method else None
    loader = DataLoader(
        FailingDataset(n=16, bad=3), batch_size=2, num_workers=num_workers, multiprocessing_context=context
    )
    try:
        _run_epoch(loader)
    except ValueError:
        pass
    else:
        raise AssertionError("the epoch did not fail")
    start = time.perf_counter()
    gc.collect()  # what ends the failed iterator, sooner or later, in any program
    return {"seconds": time.perf_counter() - start, "interval": float(interval), "workers": float(num_workers)}


def aborted_epoch_in_private_tmp(num_workers: int = 2, interval: float = 0.5) -> tuple[dict[str, float], int]:
    """`aborted_epoch` under the watchdog, in a child with a private temporary folder (removed afterwards):
    (its report, how many entries the terminated workers left in that folder).

    The child and its workers start by fork where it exists: a forkserver's workers would be children of a
    server started with this process's temporary folder, and leave their folders there instead."""
    from helpers.worker_deaths import in_private_tmp

    method = "fork" if "fork" in torch.multiprocessing.get_all_start_methods() else "spawn"
    return in_private_tmp(aborted_epoch, num_workers, interval, method, start_method=method)


# ---- other libraries' thread pools inside workers -----------------------------------------------------


class BlasDataset(Dataset):
    """CPU-bound through NumPy's BLAS: each sample multiplies `size` x `size` matrices `products` times (a
    feature transform, a whitening). Each sample also reports the thread counts of the process that
    loaded it: torch's, and that of NumPy's BLAS as threadpoolctl reads it (None: no BLAS it can see)."""

    def __init__(self, n: int = 32, size: int = 384, products: int = 4) -> None:
        self.n = positive_int("n", n)
        self.size = positive_int("size", size)
        self.products = positive_int("products", products)
        self.matrix = np.random.default_rng(0).standard_normal((self.size, self.size)) / math.sqrt(self.size)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        from threadpoolctl import threadpool_info

        product = self.matrix
        for _ in range(self.products):
            product = product @ self.matrix
        blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
        return {
            "value": float(product[0, 0]),
            "torch threads": torch.get_num_threads(),
            "blas threads": blas[0] if blas else None,
        }


def limit_blas_threads(worker_id: int) -> None:
    """worker_init_fn: one thread for NumPy's BLAS (OpenBLAS or MKL) in each worker, as DataLoader already
    does for torch's own. threadpoolctl finds the BLAS libraries loaded in the process and calls their
    set-threads function; OpenCV has its own: `cv2.setNumThreads(1)`."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")


def blas_epoch_seconds(
    limited: bool, num_workers: int = 2, n: int = 32, start_method: str | None = None
) -> tuple[float, dict[str, Any]]:
    """Seconds for one epoch of `BlasDataset(n)` on `num_workers` workers, from the first batch on (so
    the workers' start-up is left out), with or without `limit_blas_threads`; and the first sample, whose
    thread counts say what a worker ran with."""
    positive_int("num_workers", num_workers)
    if not isinstance(limited, bool):
        raise TypeError(f"limited must be True or False, got {type(limited).__name__}")
    context = torch.multiprocessing.get_context(start_method) if start_method else None
    loader = DataLoader(
        BlasDataset(n=n),
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context=context,
        worker_init_fn=limit_blas_threads if limited else None,
        prefetch_factor=1,
    )
    iterator = iter(loader)
    first = next(iterator)  # the workers have started
    start = time.perf_counter()
    for _sample in iterator:
        pass
    seconds = time.perf_counter() - start
    del iterator
    gc.collect()
    return seconds, first
