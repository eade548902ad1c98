"""Start a group of processes and be sure they are gone when the block ends, whatever happened inside.

A notebook cell that raises halfway (a timeout, a typo, Ctrl-C) must not leave workers behind: they hold
shared memory, file descriptors and cores, and nbval's final check finds them. `running` joins with a
deadline, then terminates, then kills.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["running", "stop", "join_spawned"]


def stop(procs: Sequence[BaseProcess], timeout: float = 5.0) -> list[int | None]:
    """Join each process for up to `timeout` seconds in all, then terminate, then kill; return exit codes."""
    import time

    deadline = time.monotonic() + timeout
    for proc in procs:
        if proc._popen is not None:  # started
            proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc._popen is not None and proc.is_alive():
            proc.terminate()
            proc.join(1.0)
        if proc._popen is not None and proc.is_alive():
            proc.kill()
            proc.join(1.0)
    return [proc.exitcode for proc in procs]


@contextlib.contextmanager
def running(procs: Sequence[BaseProcess], timeout: float = 5.0) -> Iterator[Sequence[BaseProcess]]:
    """Start `procs`, yield them, and on leaving wait for them (`timeout` s in all) or end them."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    procs = list(procs)
    for proc in procs:
        if not isinstance(proc, BaseProcess):
            raise TypeError(f"procs must hold multiprocessing Process objects, got {type(proc).__name__}")
    try:
        for proc in procs:
            proc.start()
        yield procs
    finally:
        stop(procs, timeout)


def join_spawned(context: Any, timeout: float, on_timeout: Callable[[], None] | None = None) -> None:
    """`ProcessContext.join` (torch.multiprocessing.spawn / start_processes with join=False) with an
    overall deadline, since spawn's own join=True waits forever: `TimeoutError` after `timeout` seconds,
    after calling `on_timeout` while the processes still live (e.g. to ask them for their stacks);
    whatever happens, every process of the context is killed if still alive and joined."""
    import time

    deadline = time.monotonic() + timeout
    try:
        while not context.join(timeout=max(0.0, min(0.05, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                if on_timeout is not None:
                    on_timeout()
                raise TimeoutError(f"spawned processes still running after {timeout:g} s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
            process.join(5)
