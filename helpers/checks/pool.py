"""Checkers for notebook 04 (Pool vs Process)."""

from __future__ import annotations

from typing import Any

from helpers.checks.core import Verdict, not_ready, verdict

__all__ = ["imap_pipeline", "chunksize_choice"]

_ITEMS = [3, 0, 2, 1, 0, 2]
_TOLERANCE = 1.25  # within 25% of the best chunksize counts as a good choice


class _Recorder:
    """Stands in for both the Pool and the progress bar: forwards to the real pool and writes down, in
    one list, every result the learner's code receives and every bar update, in the order they happen."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.events: list[str] = []
        self.methods: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._pool, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            self.methods.append(name)
            answer = method(*args, **kwargs)
            if name in ("imap", "imap_unordered"):
                return self._watch(answer)
            return answer

        return call

    def _watch(self, iterator: Any) -> Any:
        for item in iterator:
            self.events.append("result")
            yield item

    def update(self, n: int = 1) -> None:
        self.events.append(f"update {n}")


def imap_pipeline(fn: Any) -> Verdict:
    """Exercise: `fn(pool, items, bar)` returns `delayed_square` of every item, in input order, taking
    each result as it comes (imap) and advancing the bar by one per result."""
    if (unready := not_ready(fn, "my_pipeline", "(pool, items, bar) -> results", needs_fork=False)) is not None:
        return unready
    import gc

    from helpers.environment import default_context

    expected = [x * x for x in _ITEMS]
    with default_context().Pool(2) as pool:
        recorder = _Recorder(pool)  # learner code passes it on as the pool and as the bar
        try:
            got = fn(recorder, list(_ITEMS), recorder)
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            from helpers.errors import short_error

            return verdict(False, "", f"your pipeline raised {short_error(exc)}")
        pool.close()
        pool.join()
    del pool
    gc.collect()
    used = set(recorder.methods) & {"map", "map_async", "imap", "imap_unordered", "apply_async", "starmap"}
    if got is None:
        return verdict(False, "", "return the list of results.")
    if list(got) != expected:
        return verdict(False, "", f"got {list(got)}, expected {expected} (input order).")
    if "imap" not in used or used - {"imap"}:
        return verdict(False, "", f"you used {sorted(used)}: use pool.imap, which yields results in order as ready.")
    pattern = ["result", "update 1"] * len(_ITEMS)
    if recorder.events != pattern:
        return verdict(False, "", "call bar.update(1) once for each result, as soon as you receive it.")
    return verdict(True, "results in input order, each counted on the bar the moment it arrives.", "")


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
