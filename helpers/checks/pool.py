"""Checkers for notebook 04 (Pool vs Process)."""

from __future__ import annotations

import time
from typing import Any

from helpers.checks.core import Verdict, not_ready, verdict

__all__ = ["imap_pipeline", "chunksize_choice"]

# Quick items first and one slow item (3: 0.6 s) in the middle: a pipeline that streams shows its first
# results within about 0.1 s, while the whole run takes about 0.7 s on 2 workers; one that waits for
# everything shows nothing until the end. imap_unordered finishes the slow item last: another order.
PIPELINE_ITEMS = [0, 1, 2, 3, 0, 1]
_TOLERANCE = 1.25  # within 25% of the best chunksize counts as a good choice
# The bar must have moved before this share of the run had passed. With imap's default chunksize of 1 the first
# result (item 0 sleeps 0 s) arrives within milliseconds of a run of about 0.7 s; with chunks of three on two
# workers it arrives after 4 of 7 units (0.57). At 0.5 that wrong answer was called correct once in five calls
# of a clean run with one core kept busy: the load had made that run at least twice as long as its first
# chunk. At 0.3 the run must take 3.3 times as long, and the right answer still has 0.2 s for its first result.
_STREAMED = 0.3
_MANY = ("map", "starmap", "imap", "imap_unordered", "map_async", "starmap_async")  # methods taking many tasks


class _Recorder:
    """Stands in for both the Pool and the progress bar: forwards to the real pool and writes down, with
    the time, every result the learner's code receives (from any pool method) and every bar update."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.t0 = time.monotonic()
        self.results: list[float] = []  # when each result reached the learner's code
        self.updates: list[tuple[float, Any]] = []  # (when, n) of each bar.update(n)
        self.sent = 0  # tasks handed to the pool
        self.most_in_flight = 0  # the most tasks handed out and not yet received, at any moment

    def _got(self, n: int) -> None:
        now = time.monotonic() - self.t0
        self.results.extend([now] * n)

    def _sent(self, n: int) -> None:
        self.sent += n
        self.most_in_flight = max(self.most_in_flight, self.sent - len(self.results))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._pool, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            if name in _MANY and len(args) >= 2:
                args = (args[0], list(args[1]), *args[2:])  # counted here, handed on whole
                self._sent(len(args[1]))
            elif name in _MANY and "iterable" in kwargs:
                kwargs["iterable"] = list(kwargs["iterable"])
                self._sent(len(kwargs["iterable"]))
            elif name in ("apply", "apply_async"):
                self._sent(1)
            answer = method(*args, **kwargs)
            if name in ("imap", "imap_unordered"):
                return self._watch(answer)
            if name in ("map", "starmap"):
                self._got(len(answer))
            if name == "apply":
                self._got(1)
            if name in ("apply_async", "map_async", "starmap_async"):
                return _WatchedResult(answer, self, several=name != "apply_async")
            return answer

        return call

    def _watch(self, iterator: Any) -> Any:
        for item in iterator:
            self._got(1)
            yield item

    def update(self, n: int = 1) -> None:
        self.updates.append((time.monotonic() - self.t0, n))


class _WatchedResult:
    """An AsyncResult whose get() is recorded as results arriving."""

    def __init__(self, result: Any, recorder: _Recorder, several: bool) -> None:
        self._result, self._recorder, self._several = result, recorder, several

    def get(self, timeout: float | None = None) -> Any:
        value = self._result.get(timeout)
        self._recorder._got(len(value) if self._several else 1)
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._result, name)


def _ahead(recorder: _Recorder) -> bool:
    """Did the bar ever count more results than the learner's code had received by then?"""
    counted = 0
    for when, n in recorder.updates:
        counted += n
        if counted > sum(1 for t in recorder.results if t <= when):
            return True
    return False


def imap_pipeline(fn: Any) -> Verdict:
    """Exercise: `fn(pool, items, bar)` returns `delayed_square` of every item, in input order, and the bar
    moves while the pool works: one update of 1 per result, each after that result has arrived, the first
    of them while most of the run is still to come (measured against the time the whole call took), and
    the pool's workers work side by side (at some moment two tasks were handed out and not yet back)."""
    if fn is not None and not callable(fn):
        return verdict(False, "", f"my_pipeline must be a function (pool, items, bar) -> results, not a "
                       f"{type(fn).__name__}.")  # fmt: skip
    if (unready := not_ready(fn, "my_pipeline", "(pool, items, bar) -> results", needs_fork=False)) is not None:
        return unready
    import gc

    from helpers.environment import default_context
    from helpers.errors import short_error

    expected = [x * x for x in PIPELINE_ITEMS]
    with default_context().Pool(2) as pool:
        pool.map(abs, range(4))  # the workers are up: start-up is not part of the run measured below
        recorder = _Recorder(pool)  # learner code passes it on as the pool and as the bar
        try:
            got = fn(recorder, list(PIPELINE_ITEMS), recorder)
            if got is not None and not isinstance(got, (str, bytes)) and hasattr(got, "__iter__"):
                got = list(got)  # a generator runs now, while the pool still does
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            return verdict(False, "", f"your pipeline raised {short_error(exc)}")
        finally:
            elapsed = time.monotonic() - recorder.t0
            pool.close()
            pool.join()
    del pool
    gc.collect()
    if got is None:
        return verdict(False, "", "return the list of results.")
    if not isinstance(got, list):
        return verdict(False, "", f"return the list of results, not a {type(got).__name__}.")
    if got != expected:
        return verdict(False, "", f"got {got} for the items {PIPELINE_ITEMS}, expected {expected}: the results must "
                       "come back in input order (imap_unordered gives the order in which they finish).")  # fmt: skip
    sizes = [n for _, n in recorder.updates]
    if sizes != [1] * len(expected):
        return verdict(False, "", f"the bar was updated by {sizes}: call bar.update(1) once for each result, as "
                       "soon as you receive it, so it moves one step at a time.")  # fmt: skip
    if _ahead(recorder):
        return verdict(False, "", "the bar counted results before they had arrived: update it after you "
                       "receive each result, so it shows the work done.")  # fmt: skip
    if recorder.most_in_flight < 2:
        return verdict(
            False, "", "the pool never had two of your tasks at once: each was sent only after the previous "
            "result came back, so one worker worked and the other waited. Hand the pool every item first "
            "(pool.imap), then take the results as they come.",
        )  # fmt: skip
    first = recorder.updates[0][0]
    if first > _STREAMED * elapsed:
        return verdict(
            False,
            "",
            f"the bar first moved after {first:.2f} s of a {elapsed:.2f} s run: the results reached your code all "
            "at once near the end (a map, a list(...) of the iterator, or one big chunk). Take each result as "
            "the pool yields it: iterate over pool.imap with a small chunksize (its default is 1).",
        )
    # no timings in the praise: the notebook stores this verdict and nbval compares it
    return verdict(True, "results in input order; the bar moved while the pool worked, once per result as it "
                   "arrived.", "")  # fmt: skip


def chunksize_choice(chunksize: Any) -> Verdict:
    """Exercise: a chunksize for 4,000 tasks on 4 workers whose last 40 tasks are slow, given a measured
    per-chunk overhead of 0.1 ms; judged by `helpers.pool.simulate_makespan`, not by a noisy timing."""
    if chunksize is None:
        return verdict(False, "", "set my_chunksize, then run this cell again.")
    if isinstance(chunksize, bool) or not isinstance(chunksize, int) or chunksize < 1:
        return verdict(False, "", "a chunksize is a whole number >= 1.")
    from helpers.pool import default_chunksize, simulate_makespan, tail_heavy_durations

    durations, workers, overhead = tail_heavy_durations(), 4, 0.0001
    costs = {c: simulate_makespan(durations, workers, c, overhead) for c in range(1, len(durations) + 1)}
    best = min(costs, key=costs.__getitem__)
    default = default_chunksize(len(durations), workers)
    mine = costs.get(chunksize, costs[len(durations)])
    summary = (
        f"{mine * 1000:.0f} ms (default chunksize {default}: {costs[default] * 1000:.0f} ms; "
        f"best: {costs[best] * 1000:.0f} ms)"
    )
    if mine > _TOLERANCE * costs[best]:
        # no best figure and no direction: the learner finds them with the model, not by asking the checker
        return verdict(
            False,
            "",
            f"chunksize {chunksize} takes {mine * 1000:.0f} ms in the model, more than 25% above the best. Weigh "
            "the two costs (the overhead paid once per chunk, the slow tail shared by the workers) by evaluating "
            "pools.simulate_makespan for many chunksizes.",
        )
    return verdict(True, f"chunksize {chunksize} takes {summary}.", "")
