"""Checkers for the exercises: each returns a `Verdict`, which a notebook shows as one line ("Correct: ..."
or "Not yet: ... hint") and which is truthy only when the answer is right, so it can also be asserted.

A verdict is returned, not printed: nbval runs cells without storing history, so IPython cannot see a
trailing `;` there, and a checker that printed *and* returned a value would show two outputs.

A checker must give the same verdict on every machine for the same answer: it tests the answer on fixed
cases or by running it under the watchdog, never by timing it.
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "Verdict",
    "verdict",
    "threads_per_process",
    "fork_safe_settings",
    "main_guard_script",
    "worker_init_fn",
    "shard_bounds",
    "io_workers",
    "keep_received",
    "collect",
    "exact_counter",
]


class Verdict:
    """The result of a checker: `bool(v)` says whether the answer is right, `repr(v)` says why."""

    def __init__(self, ok: bool, message: str) -> None:
        self.ok = bool(ok)
        self.message = message

    def __bool__(self) -> Verdict:
        return self.ok

    def __repr__(self) -> str:
        return self.message


def verdict(ok: bool, praise: str, hint: str) -> Verdict:
    """`Correct: praise` when ok, else `Not yet: hint`."""
    return Verdict(ok, f"Correct: {praise}" if ok else f"Not yet: {hint}")


# ---- 00 Orientation --------------------------------------------------------------------------------


def threads_per_process(fn: Callable[[int, int], Any]) -> Verdict:
    """Exercise: `fn(processes, cores)` returns the torch threads each process should use."""
    if not callable(fn):
        raise TypeError(f"fn must be a function (processes, cores) -> threads, got {type(fn).__name__}")
    cases = {(1, 8): 8, (2, 8): 4, (3, 8): 2, (8, 8): 1, (16, 8): 1, (2, 2): 1, (4, 2): 1, (1, 1): 1}
    for (processes, cores), want in cases.items():
        try:
            got = fn(processes, cores)
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            return verdict(False, "", f"fn({processes}, {cores}) raised {type(exc).__name__}: {exc}")
        if got is None:
            return verdict(False, "", "your function returns None: return a number of threads.")
        if isinstance(got, bool) or not isinstance(got, int):
            return verdict(False, "", f"fn({processes}, {cores}) returned {got!r}; torch wants an int.")
        if got != want:
            hint = (
                f"fn({processes}, {cores}) returned {got}, expected {want}. Share the cores evenly and "
                "round down, but never go below 1 thread."
            )
            return verdict(False, "", hint)
    return verdict(True, "processes x threads never exceeds the cores, and every process gets >= 1.", "")


def fork_safe_settings(start_method: Any, threads: Any, timeout: float = 3.0) -> Verdict:
    """Exercise: pick a start method and thread count so `parallel_sum` runs with >= 2 threads."""
    from helpers import orientation, watchdog

    if start_method is None or threads is None:
        return verdict(False, "", "set my_start_method and my_threads, then run this cell again.")
    import multiprocessing as mp

    if start_method not in mp.get_all_start_methods():
        return verdict(False, "", f"start method must be one of {mp.get_all_start_methods()}.")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 2:
        return verdict(False, "", "use at least 2 threads: the point is a child that runs parallel ops.")
    outcome = watchdog.run(orientation.parallel_sum, threads, timeout=timeout, start_method=start_method)
    if outcome.status == "hung":
        return verdict(False, "", f"the child {outcome}. Which start method does not copy OpenMP's state?")
    if outcome.status != "returned" or outcome.value != 4_000_000.0:
        return verdict(False, "", f"the child {outcome}.")
    return verdict(True, f"{start_method} with {threads} threads finished: {outcome}.", "")


def main_guard_script(source: Any, timeout: float = 5.0) -> Verdict:
    """Exercise: a script with a spawn Pool must finish and print its results when run as a file."""
    from helpers import watchdog

    if not isinstance(source, str) or not source.strip():
        return verdict(False, "", "my_script must be the text of a Python script.")
    with tempfile.TemporaryDirectory(prefix="exercise-") as tmp:
        path = Path(tmp, "exercise.py")
        path.write_text(inspect.cleandoc(source) + "\n")
        outcome = watchdog.run_script(path, timeout=timeout)
    if outcome.status == "hung":
        hint = "What does a spawn child run again when it imports the script?"
        return verdict(False, "", f"the script {outcome}; {outcome.stderr_error or 'no error printed'}. {hint}")
    if outcome.status != "returned":
        return verdict(False, "", f"the script {outcome}.")
    if "set_start_method" in source:
        return verdict(False, "", "it ran, but prefer mp.get_context('spawn') to a global set_start_method.")
    if "results: [0, 1, 4, 9]" not in outcome.stderr:
        return verdict(False, "", "keep the print: the script should print 'results: [0, 1, 4, 9]'.")
    return verdict(True, "the workers import the script without re-running the pool.", "")


# ---- 01 DataLoader workers -----------------------------------------------------------------------


def _fork_or_none() -> str | None:
    """Exercise code defined in a notebook can reach DataLoader workers only by fork (spawn re-imports
    by name); the checkers pin it, and say so where it does not exist."""
    import multiprocessing as mp

    return "fork" if "fork" in mp.get_all_start_methods() else None


def _not_ready(fn: Any, variable: str, signature: str, needs_fork: bool = True) -> Verdict | None:
    """The first steps every checker of learner code shares: nothing written yet (the placeholder is
    None), not a function, or no fork to carry a notebook function into child processes."""
    if fn is None:
        return verdict(False, "", f"write {variable}, then run this cell again.")
    if not callable(fn):
        raise TypeError(f"fn must be a function {signature}, got {type(fn).__name__}")
    if needs_fork and _fork_or_none() is None:
        return verdict(False, "", "this checker needs the fork start method (Linux or macOS).")
    return None


def worker_init_fn(fn: Any) -> Verdict:
    """Exercise: a worker_init_fn that gives each worker's dataset copy its own, reproducible generator."""
    if (not_ready := _not_ready(fn, "my_worker_init_fn", "worker_id -> None")) is not None:
        return not_ready
    context = "fork"
    import torch
    from torch.utils.data import DataLoader

    from helpers.loading import StoredRngDataset

    def draws(seed: int) -> list[tuple[int, int]]:
        loader = DataLoader(
            StoredRngDataset(n=8),
            batch_size=None,
            num_workers=2,
            worker_init_fn=fn,
            generator=torch.Generator().manual_seed(seed),
            multiprocessing_context=context,
        )
        return [(row["worker"], row["augment"]) for row in loader]

    try:
        first, again, other = draws(0), draws(0), draws(1)
    except Exception as exc:  # noqa: BLE001 - the learner's function may raise anything
        from helpers.errors import short_error

        return verdict(False, "", f"the loader failed: {short_error(exc, line='last')}")
    per_worker = {w: [a for worker, a in first if worker == w] for w in (0, 1)}
    if per_worker[0] == per_worker[1]:
        return verdict(False, "", "both workers still draw the same numbers: reseed info.dataset.rng per worker.")
    if first != again:
        return verdict(
            False,
            "",
            "the draws change between runs with the same generator seed: derive the seed "
            "from get_worker_info().seed (or torch.initial_seed()), not from the clock or OS entropy.",
        )
    if first == other:
        return verdict(False, "", "a different DataLoader generator gives the same draws: use the worker's seed.")
    return verdict(True, "workers differ, and a seeded DataLoader generator makes the draws reproducible.", "")


def shard_bounds(fn: Any) -> Verdict:
    """Exercise: `fn(n, worker_id, num_workers) -> (start, end)` must give every item to exactly one worker."""
    if (
        not_ready := _not_ready(fn, "my_shard_bounds", "(n, worker_id, num_workers) -> (start, end)", needs_fork=False)
    ) is not None:
        return not_ready
    for n in (0, 1, 7, 8, 10, 33):
        for workers in (1, 2, 3, 4):
            seen: list[int] = []
            for worker in range(workers):
                try:
                    start, end = fn(n, worker, workers)
                except Exception as exc:  # noqa: BLE001
                    return verdict(False, "", f"fn({n}, {worker}, {workers}) raised {type(exc).__name__}: {exc}")
                seen += range(start, end)
            if sorted(seen) != list(range(n)):
                return verdict(
                    False,
                    "",
                    f"with n={n} and {workers} workers the shards cover {sorted(seen)}, not 0..{n - 1} once each.",
                )
    context = _fork_or_none()
    if context is None:
        return verdict(True, "every item goes to exactly one worker (loader run skipped: no fork here).", "")
    from torch.utils.data import DataLoader

    from helpers.loading import ShardedRangeStream

    loader = DataLoader(
        ShardedRangeStream(10, bounds=fn), batch_size=None, num_workers=2, multiprocessing_context=context
    )
    items = sorted(int(x) for x in loader)
    if items != list(range(10)):
        return verdict(False, "", f"inside a real DataLoader the items were {items}.")
    return verdict(True, "every item goes to exactly one worker, also inside a real DataLoader.", "")


def io_workers(num_workers: Any) -> Verdict:
    """Exercise: workers needed so a loader with 20 ms per sample, batches of 8, keeps up with a
    training step of 40 ms per batch (Little's law: in flight = rate x latency)."""
    if num_workers is None:
        return verdict(False, "", "set my_num_workers, then run this cell again.")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int):
        return verdict(False, "", "num_workers is a whole number.")
    per_batch, step = 8 * 0.020, 0.040  # seconds for one worker to load a batch; for the main loop to use it
    needed = round(per_batch / step)
    if num_workers < needed:
        rate = num_workers / per_batch
        return verdict(False, "", f"{num_workers} workers deliver {rate:.1f} batches/s; the loop uses {1 / step:.0f}.")
    if num_workers > 2 * needed:
        return verdict(
            False,
            "",
            f"{num_workers} keep up, but each worker is a process with its own memory; "
            f"{needed} already deliver a batch every {step * 1000:.0f} ms.",
        )
    return verdict(
        True,
        f"{num_workers} workers each load a batch in {per_batch * 1000:.0f} ms, so {needed} "
        "of them deliver one every 40 ms. Waiting uses no CPU: this may exceed your core count.",
        "",
    )


# ---- 02 Shared tensors and queues -----------------------------------------------------------------


def keep_received(fn: Any) -> Verdict:
    """Exercise: decide what to keep of each received shared tensor so 200 fit under 64 open files."""
    if (not_ready := _not_ready(fn, "my_keep", "tensor -> what to keep")) is not None:
        return not_ready
    from helpers import sharing, watchdog

    outcome = watchdog.run(sharing.hold_many_tensors, keep=fn, start_method="fork", timeout=30)
    if outcome.status != "returned":
        return verdict(False, "", f"receiving {outcome}. Each kept shared tensor holds a file descriptor open.")
    return verdict(True, "200 tensors kept with 48 spare file descriptors: copies hold none.", "")


def collect(fn: Any) -> Verdict:
    """Exercise: take an 8 MB array from a producer's queue and join the producer, without hanging."""
    if (not_ready := _not_ready(fn, "my_collect", "(queue, process) -> item")) is not None:
        return not_ready
    from helpers import sharing, watchdog

    outcome = watchdog.run(sharing.collect_from_producer, fn, start_method="fork", timeout=5)
    if outcome.status == "hung":
        return verdict(False, "", f"it {outcome}. Who is waiting for whom?")
    if outcome.status != "returned" or outcome.value != "got the array and joined the producer":
        return verdict(False, "", f"it {outcome}.")
    return verdict(True, "the queue is drained before the join, so the producer's feeder thread can finish.", "")


def exact_counter(fn: Any) -> Verdict:
    """Exercise: an increment of a shared mp.Value that loses no update under contention."""
    if (not_ready := _not_ready(fn, "my_increment", "counter -> None")) is not None:
        return not_ready
    from helpers import sharing

    try:
        total = sharing.count_with_function(fn, workers=4, times=5_000)
    except Exception as exc:  # noqa: BLE001
        return verdict(False, "", f"the workers failed: {type(exc).__name__}: {exc}")
    if total < 20_000:
        return verdict(False, "", "updates were lost (the total is below 4 x 5,000): read-add-write must be atomic.")
    if total > 20_000:
        return verdict(False, "", "the total is above 4 x 5,000: increment by exactly 1 per call.")
    return verdict(True, "4 x 5,000 increments, none lost.", "")
