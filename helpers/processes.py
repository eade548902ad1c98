"""Start a group of processes and be sure they are gone when the block ends, whatever happened inside.

A notebook cell that raises halfway (a timeout, a typo, Ctrl-C) must not leave workers behind: they hold
shared memory, file descriptors and cores, and nbval's final check finds them. `running` joins with a
deadline, then terminates, then kills. The other helpers here serve the chapters that start pools and
`torch.multiprocessing.spawn` jobs: a context by name, a pool's live workers, and spawn's leftovers.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

__all__ = [
    "running",
    "stop",
    "join_spawned",
    "mp_context",
    "live_workers",
    "quiet_spawn_log",
    "remove_error_files",
    "collected_after",
]

F = TypeVar("F", bound=Callable[..., Any])


def mp_context(start_method: str | None = None) -> Any:
    """The multiprocessing context of `start_method`, or of this platform's default when None, read
    without fixing the default (see `environment.default_start_method`); a ValueError naming the
    methods this platform has for any other name."""
    from helpers.environment import default_context

    if start_method is None:
        return default_context()
    if start_method not in mp.get_all_start_methods():
        raise ValueError(f"start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}")
    return mp.get_context(start_method)


def live_workers(pool: Any) -> list[Any]:
    """The worker processes of a `multiprocessing.Pool` that are alive now: how the demos see a death and
    its replacement (`Pool` has no public view of its workers)."""
    return [p for p in list(pool._pool) if p.is_alive()]  # noqa: SLF001


@contextlib.contextmanager
def quiet_spawn_log() -> Iterator[None]:
    """Quiet torch's "Terminating process N via signal SIGTERM" log line (it carries a pid and a time, and
    children never write to a checked cell) while the block runs. The caller removes the error files
    with `remove_error_files`."""
    logger = logging.getLogger("torch.multiprocessing.spawn")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def remove_error_files(context: Any) -> None:
    """Delete the traceback files (`pytorch-errorfile-*.pickle`) a `ProcessContext`'s failing ranks wrote.

    torch names one per rank in `context.error_files` (in the temporary folder) and never removes them.
    We remove them by name rather than by pointing `tempfile.tempdir` at a folder of our own while the
    ranks start: that setting is process-wide, and multiprocessing creates its own `pymp-*` folder (and,
    under forkserver, the server's socket) in whatever folder it names, which would then vanish with it.
    """
    for path in getattr(context, "error_files", None) or ():
        if path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


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


def collected_after(fn: F) -> F:
    """Collect garbage once `fn` has returned, when its frame no longer holds anything.

    Why: a `Pool` sits in a reference cycle while a result it handed out is still in its cache (each
    result points back at the pool). Under spawn and forkserver each of the pool's semaphores is a file in
    /dev/shm until the cycle is collected, which in a kernel can be many cells later, and a kernel that is
    killed never collects it (its resource tracker then removes them, warning of "leaked semaphore
    objects"). A `gc.collect()` inside `fn` cannot free what `fn`'s own variables still hold."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            gc.collect()

    return wrapper  # type: ignore[return-value]


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
