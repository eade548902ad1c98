"""Checkers for notebook 02 (shared tensors and queues)."""

from __future__ import annotations

from typing import Any

from helpers.checks.core import Verdict, not_ready, verdict

__all__ = ["keep_received", "collect", "exact_counter"]


def keep_received(fn: Any) -> Verdict:
    """Exercise: decide what to keep of each received shared tensor so 200 fit under 64 open files."""
    if (unready := not_ready(fn, "my_keep", "tensor -> what to keep")) is not None:
        return unready
    from helpers import sharing, watchdog

    outcome = watchdog.run(sharing.hold_many_tensors, keep=fn, start_method="fork", timeout=30)
    if outcome.status != "returned":
        return verdict(False, "", f"receiving {outcome}. Each kept shared tensor holds a file descriptor open.")
    return verdict(True, "200 tensors kept with 48 spare file descriptors: copies hold none.", "")


def collect(fn: Any) -> Verdict:
    """Exercise: take an 8 MB array from a producer's queue and join the producer, without hanging."""
    if (unready := not_ready(fn, "my_collect", "(queue, process) -> item")) is not None:
        return unready
    from helpers import sharing, watchdog

    outcome = watchdog.run(sharing.collect_from_producer, fn, start_method="fork", timeout=5)
    if outcome.status == "hung":
        return verdict(False, "", f"it {outcome}. Who is waiting for whom?")
    if outcome.status != "returned" or outcome.value != "got the array and joined the producer":
        return verdict(False, "", f"it {outcome}.")
    return verdict(True, "the queue is drained before the join, so the producer's feeder thread can finish.", "")


def exact_counter(fn: Any, tries: int = 5) -> Verdict:
    """Exercise: an increment of a shared mp.Value that loses no update under contention.

    A race does not lose updates every time: if the scheduler happens to run the workers one after the
    other, an unlocked increment comes out exact. So the answer must be exact in `tries` runs in a row; a
    wrong one loses updates in at least one of them (seen here: several thousand lost in nearly every run).
    """
    if (unready := not_ready(fn, "my_increment", "counter -> None")) is not None:
        return unready
    from helpers import sharing

    for _ in range(tries):
        try:
            total = sharing.count_with_function(fn, workers=4, times=5_000)
        except Exception as exc:  # noqa: BLE001
            return verdict(False, "", f"the workers failed: {type(exc).__name__}: {exc}")
        if total < 20_000:
            return verdict(
                False, "", "updates were lost (the total is below 4 x 5,000): read-add-write must be atomic."
            )
        if total > 20_000:
            return verdict(False, "", "the total is above 4 x 5,000: increment by exactly 1 per call.")
    return verdict(True, f"4 x 5,000 increments, none lost, in {tries} runs.", "")
