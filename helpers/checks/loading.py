"""Checkers for notebook 01 (DataLoader workers)."""

from __future__ import annotations

import numbers
from typing import Any

from helpers.checks.core import Verdict, fork_or_none, not_ready, verdict

__all__ = ["worker_init_fn", "shard_bounds", "io_workers"]


def worker_init_fn(fn: Any) -> Verdict:
    """Exercise: a worker_init_fn that gives each worker's dataset copy its own, reproducible generator."""
    if (unready := not_ready(fn, "my_worker_init_fn", "worker_id -> None")) is not None:
        return unready
    context = "fork"
    import torch
    from torch.utils.data import DataLoader

    from helpers.loading import StoredRngDataset

    def draws(seed: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Two epochs of one loader whose generator is seeded with `seed`: (worker, augment) per sample."""
        loader = DataLoader(
            StoredRngDataset(n=8),
            batch_size=None,
            num_workers=2,
            worker_init_fn=fn,
            generator=torch.Generator().manual_seed(seed),
            multiprocessing_context=context,
        )
        return _epoch(loader), _epoch(loader)

    try:
        (first, second), (again, _), (other, _) = draws(0), draws(0), draws(1)
    except Exception as exc:  # noqa: BLE001 - the learner's function may raise anything
        from helpers.errors import short_error

        reason = f"the loader failed: {short_error(exc, line='last')}"
    else:
        reason = ""
    if reason:
        return verdict(False, "", reason)
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
    if first == second:
        return verdict(
            False,
            "",
            "every epoch draws the same numbers: the worker id is the same each epoch, so a seed made "
            "from it alone repeats. Which seed does the DataLoader draw anew each time workers start?",
        )
    if first == other:
        return verdict(False, "", "a different DataLoader generator gives the same draws: use the worker's seed.")
    return verdict(
        True, "workers differ, epochs differ, and a seeded DataLoader generator makes the draws reproducible.", ""
    )


def _epoch(loader: Any) -> list[tuple[int, int]]:
    """One epoch's (worker, augment) per sample. Its workers are shut down here, even when the learner's
    worker_init_fn raised: a failed iterator otherwise sits in a reference cycle with its error (chapter
    01, section 8), and its workers outlive the checker until the collector finds it."""
    batches = iter(loader)
    try:
        return [(row["worker"], row["augment"]) for row in batches]
    finally:
        batches._shutdown_workers()  # what the iterator's __del__ does, while its queues still work


def shard_bounds(fn: Any) -> Verdict:
    """Exercise: `fn(n, worker_id, num_workers) -> (start, end)` must give every item to exactly one worker,
    and no worker more than its share, ceil(n / num_workers) (one worker taking it all covers every item
    once too, and shards nothing)."""
    if (
        unready := not_ready(fn, "my_shard_bounds", "(n, worker_id, num_workers) -> (start, end)", needs_fork=False)
    ) is not None:
        return unready
    for n in (0, 1, 7, 8, 10, 33):
        for workers in (1, 2, 3, 4):
            seen: list[int] = []
            share = -(-n // workers)  # ceil(n / workers): the most items one worker may get
            for worker in range(workers):
                try:
                    bounds = fn(n, worker, workers)
                except Exception as exc:  # noqa: BLE001
                    return verdict(False, "", f"fn({n}, {worker}, {workers}) raised {type(exc).__name__}: {exc}")
                if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
                    return verdict(
                        False, "", f"fn({n}, {worker}, {workers}) returned {bounds!r}: return a pair (start, end)."
                    )
                if not all(isinstance(b, numbers.Integral) and not isinstance(b, bool) for b in bounds):
                    return verdict(
                        False, "", f"fn({n}, {worker}, {workers}) returned {bounds!r}: bounds are item positions, "
                        "so whole numbers (ints); `/` gives floats, `//` rounds down to an int."
                    )  # fmt: skip
                start, end = (int(b) for b in bounds)
                if not 0 <= start <= n or not 0 <= end <= n:
                    return verdict(
                        False, "", f"fn({n}, {worker}, {workers}) returned ({start}, {end}): a range outside 0..{n}: "
                        "clamp start and end to n."
                    )  # fmt: skip
                if end - start > share:
                    return verdict(
                        False, "", f"with n={n} and {workers} workers, worker {worker} yields {end - start} items, "
                        f"more than its share, ceil(n / num_workers) = {share}: sharding splits the work, so no "
                        "worker may take more than that (and then each item still goes to exactly one)."
                    )  # fmt: skip
                seen += range(start, end)
            if sorted(seen) != list(range(n)):
                return verdict(
                    False,
                    "",
                    f"with n={n} and {workers} workers the shards cover {sorted(seen)}, not 0..{n - 1} once each.",
                )
    context = fork_or_none()
    if context is None:
        return verdict(True, "every item goes to exactly one worker (loader run skipped: no fork here).", "")
    from torch.utils.data import DataLoader

    from helpers.loading import ShardedRangeStream

    loader = DataLoader(
        ShardedRangeStream(10, bounds=fn), batch_size=None, num_workers=2, multiprocessing_context=context
    )
    try:
        items = sorted(int(x) for x in loader)
    except Exception as exc:  # noqa: BLE001 - the learner's function runs in the workers
        from helpers.errors import short_error

        return verdict(False, "", f"inside a real DataLoader the workers failed: {short_error(exc, line='last')}")
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
    if num_workers > needed:
        # The exercise asks for the smallest count: more keeps up too, so say so without naming the answer.
        return verdict(
            False,
            "",
            f"{num_workers} keep up, but fewer would too, and each worker is a process with its own memory"
            " and start-up: what is the smallest number that keeps up?",
        )
    why = (
        f"one worker needs 8 x 20 ms = {per_batch * 1000:.0f} ms per batch and the loop takes one every "
        f"{step * 1000:.0f} ms, so {needed} loading at once keep it fed"
    )
    return verdict(True, f"{why}. Waiting uses no CPU: this may exceed your core count.", "")
