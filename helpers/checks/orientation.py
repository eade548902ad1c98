"""Checkers for notebook 00 (orientation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helpers.checks.core import Verdict, run_source, verdict

__all__ = ["threads_per_process", "fork_safe_settings", "main_guard_script"]


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
    outcome = run_source(source, timeout)
    if outcome is None:
        return verdict(False, "", "my_script must be the text of a Python script.")
    if outcome.status == "hung":
        hint = "What does a spawn child run again when it imports the script?"
        # Not the stack: where the parent is when killed (still starting workers or already in map) is a race.
        said = outcome.stderr_error or "nothing"
        return verdict(
            False, "", f"the script hung (killed after {outcome.timeout:g} s); its processes said: {said}. {hint}"
        )
    if outcome.status != "returned":
        return verdict(False, "", f"the script {outcome}.")
    if "set_start_method" in source:
        return verdict(False, "", "it ran, but prefer mp.get_context('spawn') to a global set_start_method.")
    if "results: [0, 1, 4, 9]" not in outcome.stderr:
        return verdict(False, "", "keep the print: the script should print 'results: [0, 1, 4, 9]'.")
    return verdict(True, "the workers import the script without re-running the pool.", "")
