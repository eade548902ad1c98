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

    outcome = watchdog.run(sharing.hold_many_tensors, keep=fn, report=True, start_method="fork", timeout=30)
    if outcome.status != "returned":
        return verdict(False, "", f"receiving {outcome}. Each kept shared tensor holds a file descriptor open.")
    kept = outcome.value
    if kept["equal tensors"] != kept["kept"]:
        types = ", ".join(kept["types"])
        return verdict(
            False, "", f"what my_keep returned is not the tensor received (kept: {types}; item "
            f"{kept['first different']} differs): keep every value of each tensor, as a tensor, without "
            "holding its shared memory."
        )  # fmt: skip
    if kept["still shared"]:
        return verdict(False, "", f"{kept['still shared']} kept tensors are still in shared memory.")
    return verdict(True, f"{kept['equal tensors']} tensors kept, equal to those received, with 48 spare file "
                   "descriptors: copies hold none.", "")  # fmt: skip


def collect(fn: Any, timeout: float = 5.0) -> Verdict:
    """Exercise: take an 8 MB array from a producer's queue and join the producer, without hanging.

    Joining first deadlocks every time (8 MB do not fit the pipe, so the producer's feeder thread never
    finishes), so a shorter `timeout` only makes a wrong answer fail sooner (the tests use it)."""
    if (unready := not_ready(fn, "my_collect", "(queue, process) -> item")) is not None:
        return unready
    from helpers import sharing, watchdog

    outcome = watchdog.run(sharing.collect_from_producer, fn, start_method="fork", timeout=timeout)
    if outcome.status == "hung":
        return verdict(False, "", f"it {outcome}. Who is waiting for whom?")
    if outcome.status != "returned":
        return verdict(False, "", f"it {outcome}.")
    said = outcome.value
    if "returned after its timeout" in said:
        return verdict(
            False, "", f"{said}: it was waiting for you to take the item off the queue. Who is waiting for whom?"
        )
    if "without a timeout" in said:
        return verdict(
            False, "", f"{said}. A producer that dies or hangs would make that wait last forever: give every "
            "get and join a timeout."
        )  # fmt: skip
    if said != "got the array and joined the producer":
        return verdict(False, "", f"{said}.")
    return verdict(
        True, "the queue is drained before the join, so the producer's feeder thread can finish, and every "
        "wait has a timeout.", ""
    )  # fmt: skip


class _Lock:
    """A lock that remembers which acquisition, if any, is in force (re-entrant, like a Value's RLock)."""

    def __init__(self) -> None:
        self.depth = 0
        self.acquisitions = 0

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        if self.depth == 0:
            self.acquisitions += 1
        self.depth += 1
        return True

    def release(self) -> None:
        if self.depth == 0:
            raise ValueError("released a lock that was not held")
        self.depth -= 1

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class _RecordingValue:
    """Stands in for `mp.Value("i")` for one call of the learner's increment: it records, for every read
    and write of `.value`, which acquisition of its lock was in force (0: none)."""

    def __init__(self) -> None:
        self._lock = _Lock()
        self._value = 0
        self.accesses: list[tuple[str, int]] = []

    def get_lock(self) -> _Lock:
        return self._lock

    def acquire(self, *args: Any) -> bool:
        return self._lock.acquire(*args)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)

    def _held(self) -> int:
        return self._lock.acquisitions if self._lock.depth else 0

    @property
    def value(self) -> int:
        self.accesses.append(("read", self._held()))
        return self._value

    @value.setter
    def value(self, new: int) -> None:
        self.accesses.append(("write", self._held()))
        self._value = new


def _one_call(fn: Any) -> str | None:
    """Run `fn` once on a recording counter: why it is wrong (no lock around the read and the write, or
    not +1), or None when its read-add-write ran under one acquisition of the counter's lock."""
    counter = _RecordingValue()
    fn(counter)
    if counter._lock.depth:
        return "the counter's lock is still held after the call: release it (a `with` block does)."
    if counter._value != 1:
        return f"one call changed the counter from 0 to {counter._value}: increment by exactly 1 per call."
    held = {acquisition for _, acquisition in counter.accesses}
    if 0 in held:
        return (
            "counter.value was read or written without holding the counter's lock, so another process can "
            "write in between: take counter.get_lock() around the read-add-write."
        )
    if len(held) > 1:
        return "the read and the write happened under two separate acquisitions of the lock: take it once, around both."
    return None


def exact_counter(fn: Any, tries: int = 1) -> Verdict:
    """Exercise: an increment of a shared mp.Value that loses no update under contention.

    Two checks, so that neither luck nor the scheduler can pass a wrong answer. First one call on a
    recording stand-in for the counter: the read and the write of `.value` must both happen under one
    acquisition of the counter's own lock. That decides every wrong answer, whatever the scheduler does:
    an increment that passes it is atomic. Then the real race, `tries` times, which the exercise is
    about: 4 processes x 50,000 increments of one `mp.Value`, started together on a Barrier. An unlocked
    increment lost updates in every one of 20 runs on 2 cores with a busy loop on each (with 5,000 each
    it came out exact in about half the runs: a worker finished within one time slice of the scheduler).
    """
    if (unready := not_ready(fn, "my_increment", "counter -> None")) is not None:
        return unready
    from helpers import sharing

    try:
        problem = _one_call(fn)
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        return verdict(False, "", f"my_increment(counter) raised {type(exc).__name__}: {exc}")
    if problem is not None:
        return verdict(False, "", problem)
    expected = 4 * 50_000
    for _ in range(tries):
        try:
            total = sharing.count_with_function(fn, workers=4, times=50_000)
        except Exception as exc:  # noqa: BLE001
            return verdict(False, "", f"the workers failed: {type(exc).__name__}: {exc}")
        if total != expected:
            hint = f"4 x 50,000 increments gave {total:,}, not {expected:,}: read-add-write must be atomic."
            return verdict(False, "", hint)
    runs = "one run" if tries == 1 else f"{tries} runs"
    return verdict(True, f"4 x 50,000 increments under the counter's lock, none lost, in {runs}.", "")
