"""Checkers for notebook 00 (orientation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from helpers.checks.core import Verdict, verdict
from helpers.threads import torch_threads

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


FORK_DEADLINE = 3.0  # a forked child starts at once: 3 s to sum 4 million ones is a hang
FRESH_DEADLINE = 60.0  # a spawn or forkserver child first imports torch, seconds on a busy laptop


def fork_safe_settings(start_method: Any, threads: Any, timeout: float | None = None) -> Verdict:
    """Exercise: pick a start method and thread count so `parallel_sum` runs with >= 2 threads, without
    asking for more threads than this machine's usable cores (section 7's lesson; on a machine with one
    usable core, 2 are allowed, or the exercise would have no answer).

    The checker first runs one parallel op in this process, as the exercise says the kernel has done, so
    that a forked child inherits OpenMP's state whatever ran before (a restarted kernel has run none, and
    fork would then pass by luck). The deadline (`timeout`, default by start method) lets a fresh
    interpreter import torch: a spawn child must not be called hung because it started slowly."""
    import multiprocessing as mp

    from helpers import orientation, watchdog
    from helpers.environment import usable_cores

    if start_method is None or threads is None:
        return verdict(False, "", "set my_start_method and my_threads, then run this cell again.")
    methods = mp.get_all_start_methods()
    if not isinstance(start_method, str):
        return verdict(False, "", f"my_start_method must be a string, one of {methods}; got {start_method!r}.")
    if start_method not in methods:
        return verdict(False, "", f"my_start_method must be one of {methods}, got {start_method!r}.")
    if isinstance(threads, bool) or not isinstance(threads, int):
        return verdict(False, "", f"my_threads must be a whole number (an int such as 2), not {threads!r}.")
    if threads < 2:
        return verdict(False, "", "use at least 2 threads: the point is a child that runs parallel ops.")
    cores = usable_cores()
    most = max(cores, 2)  # with one usable core, 2 threads are the only count that makes the point
    if threads > most:
        return verdict(
            False, "", f"{threads} threads on {cores} usable cores oversubscribes them (section 7): the threads "
            f"take turns and spin. Use at least 2 and at most {most}."
        )  # fmt: skip
    with torch_threads():
        orientation.parallel_sum(threads)  # this process's OpenMP pool now has `threads` threads
    if timeout is None:
        timeout = FORK_DEADLINE if start_method == "fork" else FRESH_DEADLINE
    outcome = watchdog.run(orientation.parallel_sum, threads, timeout=timeout, start_method=start_method)
    if outcome.status == "hung":
        return verdict(False, "", f"the child {outcome}. Which start method does not copy OpenMP's state?")
    if outcome.status != "returned" or outcome.value != 4_000_000.0:
        return verdict(False, "", f"the child {outcome}.")
    return verdict(True, f"{start_method} with {threads} threads finished: {outcome}.", "")


# Loaded by every interpreter the learner's script starts (through PYTHONPATH), it wraps the function each
# `Pool` worker runs and writes, per worker, whether the worker is a fresh interpreter (spawned: it ran
# this file itself) or a forked copy. So the checker measures what the exercise is about: a spawn pool's
# workers started and did the work, whatever the script's text says.
_POOL_PROBE = """
import os
import runpy
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:  # run the sitecustomize this file shadows, if any (the test suite's start-method switch)
    _other = os.path.join(_entry or ".", "sitecustomize.py")
    if os.path.abspath(_entry or ".") != _HERE and os.path.isfile(_other):
        runpy.run_path(_other)
        break

_LOG = os.environ.get("COURSE_POOL_PROBE")
if _LOG:
    _FRESH = os.getpid()
    import multiprocessing.pool as _pool

    _WORKER = _pool.worker

    def worker(*args, **kwargs):
        kind = "spawned" if os.getpid() == _FRESH else "forked"
        with open(os.path.join(_LOG, str(os.getpid())), "w") as f:
            f.write(kind)
        return _WORKER(*args, **kwargs)

    _pool.worker = worker
"""


def _run_with_pool_probe(source: str, timeout: float) -> tuple[Any, list[str]]:
    """Run the learner's script as a file under the watchdog with the pool probe; its Outcome and the
    kinds of the pool workers it started ("spawned" or "forked")."""
    import inspect
    import os
    import tempfile
    from pathlib import Path

    from helpers import watchdog

    with tempfile.TemporaryDirectory(prefix="exercise-") as tmp:
        probe, log = Path(tmp, "probe"), Path(tmp, "log")
        probe.mkdir()
        log.mkdir()
        Path(probe, "sitecustomize.py").write_text(_POOL_PROBE)
        path = Path(tmp, "exercise.py")
        path.write_text(inspect.cleandoc(source) + "\n")
        paths = [str(probe), *filter(None, [os.environ.get("PYTHONPATH")])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "COURSE_POOL_PROBE": str(log)}
        outcome = watchdog.run_script(path, timeout=timeout, env=env)
        kinds = [p.read_text() for p in sorted(log.iterdir())]
    return outcome, kinds


def main_guard_script(source: Any, timeout: float = 5.0) -> Verdict:
    """Exercise: a script with a spawn Pool must finish and print its results when run as a file.

    Measured, not read from the text: the script runs as `python file.py` would, and a probe records the
    pool workers it started, so a script that prints the list without a pool, or whose pool is forked
    (which works on Linux and breaks where spawn is the default), is refused."""
    if not isinstance(source, str) or not source.strip():
        return verdict(False, "", "my_script must be the text of a Python script (a string).")
    outcome, kinds = _run_with_pool_probe(source, timeout)
    if outcome.status == "hung":
        hint = "What does a spawn child run again when it imports the script?"
        # Not the stack: where the parent is when killed (still starting workers or already in map) is a race.
        said = outcome.stderr_error or "nothing"
        return verdict(
            False, "", f"the script hung (killed after {outcome.timeout:g} s); its processes said: {said}. {hint}"
        )
    if outcome.status != "returned":
        return verdict(False, "", f"the script {outcome}.")
    if outcome.value != 0:
        return verdict(False, "", f"the script exited with code {outcome.value}: {outcome.stderr_error}.")
    if not kinds:
        return verdict(
            False, "", "the script started no Pool workers: the exercise is the spawn Pool, fixed so that its "
            "workers can import the script. Keep `Pool(2)` and `pool.map`."
        )  # fmt: skip
    if "spawned" not in kinds:
        return verdict(
            False, "", "it ran, but its Pool workers were forked copies of the script, not spawned: that works on "
            "Linux and breaks on macOS and Windows, where spawn is the default. Keep a spawn pool "
            "(`mp.get_context('spawn').Pool(2)`) and make the script safe for it."
        )  # fmt: skip
    if "set_start_method" in source:
        return verdict(False, "", "it ran, but prefer mp.get_context('spawn') to a global set_start_method.")
    if "results: [0, 1, 4, 9]" not in outcome.stderr:
        return verdict(False, "", "keep the print: the script should print 'results: [0, 1, 4, 9]'.")
    return verdict(True, "its spawned workers imported the script without re-running the pool.", "")
