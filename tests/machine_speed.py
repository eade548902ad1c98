"""Deadlines for scripts that import torch, scaled by how busy the machine is at the moment they start.

A hang test gives its script a deadline, and the script must reach its bug before it: first its processes
import torch. In `make test` the notebook passes run beside the unit pass, and the machine can turn two to
four times slower between one test and the next. A deadline measured once, at the first test, is then too
short for a later one: the script is stopped while it still imports, and the test fails for the machine's
sake, not the code's. So `torch_deadline` takes the CPU time `import torch` used, measured once (the time it
takes on a free core), and multiplies it by how slow the machine is now, at each call.
"""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
import threading
import time

from helpers.environment import usable_cores

_PROBE = threading.Lock()  # two probes at once in one process would share the GIL and read each other as load
_IMPORT = threading.Lock()  # the corpus's first two cases ask at once: one import, not two side by side


def slowdown(seconds: float = 0.2) -> float:
    """How many times longer than on a free core a CPU-bound process takes now (1.0 on an idle machine).

    The larger of two readings: a pure-Python spin of `seconds`, its wall time over the CPU time it got
    (this moment), and the 1-minute load average plus the new process, per usable core (the last minute:
    load that comes and goes while a script runs, which one short spin can miss)."""
    with _PROBE:
        start_wall, start_cpu = time.monotonic(), time.thread_time()
        while time.monotonic() - start_wall < seconds:
            pass
        spun = (time.monotonic() - start_wall) / max(time.thread_time() - start_cpu, 1e-3)
    averaged = (os.getloadavg()[0] + 1) / usable_cores()
    return max(1.0, spun, averaged)


@functools.lru_cache(maxsize=1)
def _import_torch() -> tuple[float, float]:
    """`import torch` in a fresh interpreter: its wall seconds, and the CPU seconds it used (the time it
    takes on a free core: it reads files the page cache holds and computes)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", "import time, torch; print(time.process_time())"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return time.monotonic() - started, float(done.stdout)


# A hang script's own timeouts and sleeps must outlast any deadline a test gives it, or on a loaded machine the
# script ends on its own before diagnose looks: a case whose group timed out after 60 s was still "running"
# to a deadline that the load had stretched past 62 s, and diagnose read a failure instead of the hang.
# Longer than the corpus test's own pytest timeout (1,500 s), so that something else always ends first.
OUTLASTS_ANY_DEADLINE = 1_800.0  # seconds
PART_OF_THE_BUG = 10.0  # seconds: a short timeout or sleep that is the case itself (rank 0's 5-s evaluation)


def literal_durations(source: str) -> list[tuple[int, float]]:
    """(line, seconds) of every `timedelta(seconds=/minutes=...)` and `time.sleep(...)` with a number in
    `source`'s code (not in its strings: a program the script starts has its own reasons)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name == "sleep" and node.args and isinstance(node.args[0], ast.Constant):
            found.append((node.lineno, float(node.args[0].value)))
        if name == "timedelta":
            for keyword in node.keywords:
                unit = {"seconds": 1.0, "minutes": 60.0, "hours": 3600.0}.get(keyword.arg or "")
                if unit and isinstance(keyword.value, ast.Constant):
                    found.append((node.lineno, unit * float(keyword.value.value)))
    return found


def too_short_for_a_hang(source: str) -> list[tuple[int, float]]:
    """The durations in `source` that are neither part of the bug nor longer than any deadline."""
    return [(line, s) for line, s in literal_durations(source) if PART_OF_THE_BUG < s < OUTLASTS_ANY_DEADLINE]


def torch_deadline(factor: float) -> float:
    """`factor` times the seconds `import torch` takes on this machine as busy as it is now, plus 2 s; never
    less than `factor` times the wall time measured once (a reading of the load can be low, not the clock)."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
        raise ValueError(f"factor must be a positive number, got {factor!r}")
    with _IMPORT:
        wall, cpu = _import_torch()
    return round(factor * max(wall, cpu * slowdown()) + 2.0, 1)
