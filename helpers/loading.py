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
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

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
    `generator` each epoch: different per worker, new each epoch, reproducible with a seeded generator.
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
# they leak if the kernel is killed first. Every function here that ends an iterator collects at once.


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
    finally:
        del iterator
        gc.collect()  # see _COLLECT
    return Timeline(num_workers, spans, consumed, first or 0.0, time.time() - t0)


@dataclass
class Throughput:
    """Samples per second once running, and the start-up before the first batch, for one setting."""

    num_workers: int
    startup: float  # seconds from iter() to the first batch
    samples_per_s: float  # after the first batch
    batches: int


def measure_throughput(
    dataset: Dataset,
    num_workers: int,
    batch_size: int = 4,
    batches: int | None = None,
    step: Callable[[Any], Any] | None = None,
    multiprocessing_context: Any = None,
) -> Throughput:
    """Consume the loader once. Start-up is the time to the first batch; throughput is timed from the
    moment one batch per worker has arrived, so that what every worker loaded while the others were
    still starting does not count as steady state."""
    positive_int("num_workers", num_workers, minimum=0)
    positive_int("batch_size", batch_size)
    total = len(dataset) // batch_size  # type: ignore[arg-type]
    warmup = max(1, num_workers)
    batches = total if batches is None else positive_int("batches", batches)
    if not warmup + 1 <= batches <= total:
        raise ValueError(
            f"batches must be between {warmup + 1} (one per worker, plus one) and {total} (the dataset's"
            f" full batches), got {batches}"
        )
    kwargs: dict[str, Any] = {"batch_size": batch_size, "drop_last": True}
    if num_workers:
        kwargs.update(num_workers=num_workers, multiprocessing_context=multiprocessing_context)
    loader = DataLoader(dataset, **kwargs)
    t0 = time.perf_counter()
    iterator = iter(loader)
    try:
        startup = 0.0
        for i in range(warmup):
            batch = next(iterator)
            if step is not None:
                step(batch)
            startup = time.perf_counter() - t0 if i == 0 else startup
        t1 = time.perf_counter()
        for _ in range(batches - warmup):
            batch = next(iterator)
            if step is not None:
                step(batch)
        t2 = time.perf_counter()
    finally:
        del iterator
        gc.collect()  # see _COLLECT
    return Throughput(num_workers, startup, (batches - warmup) * batch_size / (t2 - t1), batches)


def sweep(
    dataset: Dataset,
    workers: Sequence[int],
    batch_size: int = 4,
    batches: int | None = None,
    step: Callable[[Any], Any] | None = None,
    progress: bool = True,
) -> list[Throughput]:
    """`measure_throughput` for each worker count, with a progress bar.

    A sweep goes past the core count on purpose, so DataLoader's warning about it is silenced here.
    """
    if not workers:
        raise ValueError("workers must list at least one worker count")
    from tqdm.auto import tqdm

    # tqdm's default lock includes a multiprocessing RLock: under spawn, a named semaphore that lives as
    # long as the kernel and stays in /dev/shm if the kernel is killed. A thread lock is all a bar needs.
    tqdm.set_lock(threading.RLock())
    results = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        for n in tqdm(list(workers), desc="num_workers", disable=not progress, leave=False):
            results.append(measure_throughput(dataset, n, batch_size, batches, step))
    return results


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


def first_error(loader: DataLoader) -> tuple[str, str, bool]:
    """Iterate `loader` until it raises; return (first line, last line, whether the message carries the
    worker's traceback). The iterator is shut down before returning, so no worker outlives the call.

    The exception's traceback references the iterator (a reference cycle), so `del` alone would leave
    the workers running until the garbage collector runs; and a worker forked meanwhile would inherit
    the dead iterator and complain when it exits.
    """
    iterator = iter(loader)
    try:
        for _ in iterator:
            pass
    except Exception as exc:  # noqa: BLE001 - any error a worker raises is what we want to show
        from helpers.errors import short_error

        return short_error(exc), short_error(exc, line="last"), "Original Traceback" in str(exc)
    finally:
        del iterator
        gc.collect()
    raise AssertionError("the loader finished without an error")


class _GeneratorDataset(Dataset):
    """Stores a torch.Generator on the dataset, which cannot be pickled to spawn workers."""

    def __init__(self) -> None:
        self.generator = torch.Generator().manual_seed(0)

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> int:
        return int(torch.randint(1000, (), generator=self.generator))


def torch_generator_on_dataset(multiprocessing_context: str = "spawn") -> list[int]:
    """Load a dataset that stores a torch.Generator with one worker (run it under the watchdog: spawn
    workers die printing their error, which the watchdog captures; one worker, so that no two
    tracebacks interleave in the captured output)."""
    loader = DataLoader(
        _GeneratorDataset(), batch_size=None, num_workers=1, multiprocessing_context=multiprocessing_context
    )
    return list(loader)


def catch_warnings(fn: Callable[[], Any]) -> list[str]:
    """Run fn and return the messages of the warnings it raised (in order)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught]
