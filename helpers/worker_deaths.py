"""When a worker dies (notebook 04, section 6): one worker killed with SIGKILL, the signal the kernel's
out-of-memory killer sends, in the middle of a job, and what each API then does: `multiprocessing.Pool`,
`concurrent.futures.ProcessPoolExecutor`, a DataLoader and `torch.multiprocessing.spawn` (torchrun's
answer, restarting the group, is notebook 07's). Then memory, honestly: an allocation refused under
`RLIMIT_AS` is an exception in a process that goes on, an OOM kill in a memory cgroup is a SIGKILL.

The kill is deterministic: the worker that takes item `VICTIM` announces itself and holds its task until
the parent has killed it, so the victim is always in the middle of its job. Like `helpers.pool`, this
module imports no torch at the top: spawned pool workers import it to find their task.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.environment import default_context
from helpers.errors import short_error
from helpers.pool import tiny
from helpers.processes import (
    collected_after,
    join_spawned,
    live_workers,
    mp_context,
    quiet_spawn_log,
    remove_error_files,
)
from helpers.validate import non_negative, positive_int

__all__ = [
    "square_or_die_once",
    "VICTIM",
    "hold",
    "HoldDataset",
    "kill_when_started",
    "pool_after_kill",
    "map_while_killing",
    "executor_after_kill",
    "max_tasks_per_child_error",
    "executor_worker_pids",
    "loader_after_kill",
    "spawn_after_kill",
    "in_private_tmp",
    "allocation_under_limit",
    "memory_cgroup_parent",
    "kernel_log_says_oom",
    "OomRun",
    "oom_kill",
    "DEATH_COLUMNS",
    "death_rows",
    "death_table",
]

_WAIT = 60.0  # seconds: bound for any single get/join (spawn workers that import torch start slowly)
_STATE: dict[str, Any] = {}  # per worker process: the kill demo's semaphores and pid slot, set by _init_victim


VICTIM = 0  # the item (or rank) whose worker is killed in the middle of its job


def _init_victim(started: Any, pid: Any, release: Any) -> None:
    """Initializer: keep the kill demo's semaphores and pid slot for `hold`."""
    _STATE["kill"] = (started, pid, release)


def _announce_and_hold(item: int, started: Any, pid: Any, release: Any) -> int:
    """The worker that takes VICTIM writes its pid and releases `started`; every task then waits for a
    count of `release` (bounded), so the victim is surely in the middle of its job when it is killed.

    Both are semaphores, not Events: `Event.set()` waits until every process waiting on the Event has
    woken, and a waiter that was killed never wakes, so the parent's `set()` would hang."""
    if item == VICTIM:
        pid.value = os.getpid()
        started.release()
    release.acquire(timeout=_WAIT)
    return item * item


def hold(item: int) -> int:
    """Pool and executor task of the kill demos (their workers ran `_init_victim`)."""
    return _announce_and_hold(item, *_STATE["kill"])


class HoldDataset:
    """A map-style dataset whose item VICTIM announces its worker and holds it, like `hold`."""

    def __init__(self, size: int, started: Any, pid: Any, release: Any) -> None:
        positive_int("size", size, minimum=VICTIM + 1)
        self.size, self.started, self.pid, self.release = size, started, pid, release

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return _announce_and_hold(index, self.started, self.pid, self.release)


def _spawn_hold(rank: int, started: Any, pid: Any, release: Any) -> None:
    """spawn target: rank VICTIM announces itself, every rank holds until released."""
    _announce_and_hold(rank, started, pid, release)


def _sync(ctx: Any) -> tuple[Any, Any, Any]:
    """(started, pid slot, release) of one kill demo, from the context its workers use."""
    return ctx.Semaphore(0), ctx.Value("i", 0, lock=False), ctx.Semaphore(0)


def _let_go(release: Any, tasks: int) -> None:
    """Let up to `tasks` held tasks finish (a count each; extra counts are harmless)."""
    for _ in range(tasks):
        release.release()


def kill_when_started(started: Any, pid: Any, timeout: float = _WAIT) -> int:
    """Wait until the victim has started its job, then SIGKILL it (what the OOM killer sends); its pid."""
    import signal

    non_negative("timeout", timeout)
    if not started.acquire(timeout=timeout):
        raise TimeoutError(f"the victim did not start its job within {timeout:g} s")
    os.kill(pid.value, signal.SIGKILL)
    return pid.value


def _main_thread_in(function: str, timeout: float) -> bool:
    """Wait until the main thread runs a function of this name (looked up in its stack), up to `timeout`."""
    import sys
    import threading

    main = threading.main_thread().ident
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(main)  # noqa: SLF001 - the one way to see another thread's stack
        while frame is not None:
            if frame.f_code.co_name == function:
                return True
            frame = frame.f_back
        time.sleep(0.001)
    return False


def _kill_then_let_go(started: Any, pid: Any, release: Any, tasks: int, inside: str | None) -> None:
    if inside is not None:
        _main_thread_in(inside, _WAIT)
    kill_when_started(started, pid)
    _let_go(release, tasks)


def _killer(started: Any, pid: Any, release: Any, tasks: int, inside: str | None = None) -> Any:
    """A thread that kills the victim once it has started (and, with `inside`, once the main thread is in
    that function), then lets the other tasks finish, so the main thread can block in the API meanwhile."""
    import threading

    args = (started, pid, release, tasks, inside)
    thread = threading.Thread(target=_kill_then_let_go, args=args, daemon=True)
    thread.start()
    return thread


@collected_after  # the killed task's result stays in the pool's cache, which keeps the pool in a cycle
def pool_after_kill(workers: int = 2, timeout: float = 2.0, start_method: str | None = None) -> dict[str, Any]:
    """Kill the Pool worker that runs item VICTIM of `map_async(hold, range(2 * workers))`: does the
    result come within `timeout`, is the worker replaced, does the pool still work?"""
    positive_int("workers", workers)
    non_negative("timeout", timeout)
    ctx = mp_context(start_method)
    started, pid, release = _sync(ctx)
    pool = ctx.Pool(workers, initializer=_init_victim, initargs=(started, pid, release))
    try:
        result = pool.map_async(hold, range(2 * workers), chunksize=1)
        killed = kill_when_started(started, pid)
        _let_go(release, 2 * workers)  # the other tasks may finish now
        try:
            result.get(timeout=timeout)
            timed_out = False
        except mp.TimeoutError:
            timed_out = True
        deadline = time.monotonic() + _WAIT
        while time.monotonic() < deadline:
            alive = [p.pid for p in live_workers(pool)]
            if len(alive) == workers and killed not in alive:
                break
            time.sleep(0.05)
        replaced = len(alive) == workers and killed not in alive
        after = pool.map_async(tiny, range(4)).get(timeout=_WAIT)  # a new job on the same pool
        pool.close()
    finally:
        _let_go(release, 2 * workers)
        pool.terminate()
        pool.join()
    return {
        f"map_async(...).get(timeout={timeout:g}) raised TimeoutError": timed_out,
        "the killed worker was replaced": replaced,
        "a new map on the same pool returned": after,
    }


def map_while_killing(workers: int = 2) -> list[int]:
    """`Pool.map` while another thread kills the worker of item VICTIM: never returns. Run it under the
    watchdog."""
    positive_int("workers", workers)
    ctx = default_context()
    started, pid, release = _sync(ctx)
    with ctx.Pool(workers, initializer=_init_victim, initargs=(started, pid, release)) as pool:
        _killer(started, pid, release, 2 * workers)
        return pool.map(hold, range(2 * workers), chunksize=1)


def executor_after_kill(workers: int = 2, start_method: str | None = None) -> dict[str, Any]:
    """Kill the ProcessPoolExecutor worker that runs item VICTIM of 2 x `workers` submitted tasks: what
    each future gets, how long after the kill, and whether the executor takes new work."""
    from concurrent.futures import ProcessPoolExecutor, wait

    positive_int("workers", workers)
    ctx = mp_context(start_method)
    started, pid, release = _sync(ctx)
    tasks = 2 * workers
    executor = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_victim, initargs=(started, pid, release))
    try:
        futures = [executor.submit(hold, x) for x in range(tasks)]
        kill_when_started(started, pid)
        t0 = time.perf_counter()
        done, _ = wait(futures, timeout=_WAIT)
        seconds = time.perf_counter() - t0
        errors = sorted({short_error(f.exception()) for f in done if f.exception() is not None})
        failed = sum(1 for f in done if f.exception() is not None)
        try:
            executor.submit(tiny, 1)
            refused = "accepted"
        except Exception as exc:  # noqa: BLE001 - the point is to show what arrives
            refused = short_error(exc)
    finally:
        _let_go(release, tasks)
        executor.shutdown(wait=True, cancel_futures=True)
        del executor
        gc.collect()
    return {
        "futures that failed": f"{failed} of {tasks}",
        "their error": errors[0] if len(errors) == 1 else errors,
        "a new submit": refused,
        "seconds from the kill to the last failure": seconds,
    }


def max_tasks_per_child_error() -> str:
    """What ProcessPoolExecutor says to `max_tasks_per_child` with a fork context (Linux and macOS)."""
    from concurrent.futures import ProcessPoolExecutor

    try:
        ProcessPoolExecutor(1, mp_context=mp.get_context("fork"), max_tasks_per_child=1).shutdown()
    except ValueError as exc:
        return short_error(exc)
    return "accepted"


def square_or_die_once(item: int, flag: str) -> int:
    """Task for the tests of examples/04: the worker that takes VICTIM kills itself with SIGKILL (what the
    OOM killer sends) the first time only, marked by creating the file `flag`; otherwise item squared."""
    import signal

    if item == VICTIM:
        try:
            with open(flag, "x"):
                pass
        except FileExistsError:
            return item * item
        os.kill(os.getpid(), signal.SIGKILL)
    return item * item


def _pid_of_task(_: int) -> int:
    return os.getpid()


@collected_after  # the executor and its queues may sit in cycles
def executor_worker_pids(tasks: int = 4, max_tasks_per_child: int = 2) -> dict[str, Any]:
    """One-worker ProcessPoolExecutor with `max_tasks_per_child` and no `mp_context`: which start method
    it picks by itself, and how many processes ran the tasks."""
    from concurrent.futures import ProcessPoolExecutor

    positive_int("tasks", tasks)
    positive_int("max_tasks_per_child", max_tasks_per_child)
    with ProcessPoolExecutor(1, max_tasks_per_child=max_tasks_per_child) as executor:
        method = executor._mp_context.get_start_method()  # noqa: SLF001 - the context it chose
        pids = [executor.submit(_pid_of_task, x).result(timeout=_WAIT) for x in range(tasks)]
        manager = executor._executor_manager_thread  # noqa: SLF001 - released below
    _release_ended_manager(manager)
    return {"start method it chose": method, f"processes that ran the {tasks} tasks": len(set(pids))}


# What an executor's manager thread holds of it: the call queue (three semaphores) and the result queue (two).
_MANAGER_HOLDS = (
    "thread_wakeup",
    "shutdown_lock",
    "executor_reference",
    "processes",
    "call_queue",
    "result_queue",
    "work_ids_queue",
    "pending_work_items",
)


def _release_ended_manager(manager: Any) -> None:
    """Drop what an ended executor manager thread still refers to. With `max_tasks_per_child`, that thread
    starts each replacement worker, and starting a process flushes `sys.stdout`; in a Jupyter kernel the
    flush makes ipykernel (7.x, `IOPubThread._event_pipes`) keep the thread object until its next sweep,
    every 10 s, and the thread keeps the queues, so a spawn executor's five semaphores stayed in /dev/shm
    until a later garbage collection, or until the resource tracker removed them at the kernel's shutdown
    with "There appear to be 5 leaked semaphore objects" (seen when notebook 04's kernel shut down)."""
    if manager is None or manager.is_alive():
        return
    for name in _MANAGER_HOLDS:
        if hasattr(manager, name):
            setattr(manager, name, None)


def loader_after_kill(num_workers: int = 2, start_method: str | None = None) -> dict[str, str]:
    """Kill the DataLoader worker that loads item VICTIM while the main thread waits in `next()`: the
    error it raises and the one it was raised from (SIGCHLD reaches the main thread only, so the loader
    notices at once there). Leaves `pymp-*` folders of the dead workers: run it in `in_private_tmp`."""
    from torch.utils.data import DataLoader

    positive_int("num_workers", num_workers)
    ctx = mp_context(start_method)
    started, pid, release = _sync(ctx)
    loader = DataLoader(
        HoldDataset(2 * num_workers, started, pid, release),
        batch_size=1,
        num_workers=num_workers,
        multiprocessing_context=ctx,
    )
    report = {"raised": "nothing", "raised from": "nothing"}
    batches = iter(loader)
    try:
        # SIGCHLD is handled in the main thread wherever it is: kill only once it waits inside the loader
        killer = _killer(started, pid, release, 2 * num_workers, inside="_try_get_data")
        try:
            next(batches)
        except RuntimeError as exc:
            report = {"raised": short_error(exc), "raised from": short_error(exc.__cause__) if exc.__cause__ else ""}
            del exc
        killer.join(_WAIT)
    finally:
        _let_go(release, 2 * num_workers)
        del batches
        gc.collect()
    return report


def spawn_after_kill(nprocs: int = 2, timeout: float = _WAIT) -> dict[str, Any]:
    """`torch.multiprocessing.spawn` of `nprocs` ranks; rank VICTIM is killed in the middle of its job."""
    import torch.multiprocessing as tmp

    positive_int("nprocs", nprocs, minimum=2)
    ctx = mp.get_context("spawn")
    started, pid, release = _sync(ctx)
    with quiet_spawn_log():
        context = tmp.spawn(_spawn_hold, args=(started, pid, release), nprocs=nprocs, join=False)
        try:
            kill_when_started(started, pid)
            join_spawned(context, timeout)
        except tmp.ProcessExitedException as exc:
            report: dict[str, Any] = {
                "raised": short_error(exc),
                "exit_code": exc.exit_code,
                "signal_name": exc.signal_name,
            }
        else:
            report = {"raised": "nothing"}
        finally:
            _let_go(release, nprocs)
            remove_error_files(context)
    report["exit codes"] = [p.exitcode for p in context.processes]
    return report


def _private_tmp_main(tmpdir: str, fn: Callable[..., Any], args: tuple) -> Any:
    """Watchdog target: make `tmpdir` this child's temporary folder (and its children's), then run fn."""
    import tempfile
    from multiprocessing import process

    os.environ["TMPDIR"] = tmpdir
    tempfile.tempdir = tmpdir
    process.current_process()._config.pop("tempdir", None)  # noqa: SLF001 - forget a forked parent's pymp-*
    return fn(*args)


def in_private_tmp(
    fn: Callable[..., Any], *args: Any, timeout: float = 60.0, start_method: str | None = None
) -> tuple[Any, int]:
    """Run `fn(*args)` under the watchdog in a child whose temporary folder is a fresh private one, then
    remove that folder. Returns (fn's value, how many entries were left in the folder).

    Killed workers cannot clean up: their `pymp-*` folders stay. This kernel's temporary folder is not
    redirected (that setting is process-wide, and multiprocessing keeps its own folder, and under
    forkserver the server's socket, in whatever it names)."""
    import shutil
    import tempfile

    from helpers import watchdog

    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    tmpdir = tempfile.mkdtemp(prefix="course-kill-")
    try:
        outcome = watchdog.run(_private_tmp_main, tmpdir, fn, args, timeout=timeout, start_method=start_method)
        left = len(os.listdir(tmpdir))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    if outcome.status != "returned":
        raise RuntimeError(f"{getattr(fn, '__name__', fn)} in a private temporary folder: {outcome}")
    return outcome.value, left


# ---- memory: a failed allocation is not an OOM kill --------------------------------------------------

_MB = 1 << 20


def _stderr_to(path: str) -> None:
    """Send this child's fd 2 and sys.stderr to a file (a forked kernel child's stderr is the notebook)."""
    import sys

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the child


def _allocate_with_limit(spare_mb: int, want_mb: int, kind: str, errpath: str) -> None:
    """Process target: cap this process's address space (RLIMIT_AS) at its present size + `spare_mb`,
    then allocate `want_mb` at once. The error is not caught: it ends the process, whose traceback goes
    to `errpath`."""
    import resource

    import psutil

    _stderr_to(errpath)
    if kind == "torch":
        import torch

        torch.set_num_threads(1)
    size = psutil.Process().memory_info().vms
    resource.setrlimit(resource.RLIMIT_AS, (size + spare_mb * _MB, resource.getrlimit(resource.RLIMIT_AS)[1]))
    if kind == "torch":
        torch.ones(want_mb * _MB, dtype=torch.uint8)
    else:
        bytes(want_mb * _MB)


def allocation_under_limit(
    kind: str = "python", spare_mb: int = 64, want_mb: int = 1024, start_method: str | None = None
) -> dict[str, Any]:
    """A child under `RLIMIT_AS` asks for more than its limit (Python bytes or a torch tensor): its exit
    code and the error it died of. A refused allocation is an exception in the process, not a kill."""
    import shutil
    import tempfile

    from helpers.errors import error_line

    if kind not in ("python", "torch"):
        raise ValueError(f"kind must be 'python' or 'torch', got {kind!r}")
    positive_int("spare_mb", spare_mb)
    positive_int("want_mb", want_mb, minimum=spare_mb + 1)
    folder = tempfile.mkdtemp(prefix="course-rlimit-")
    try:
        errpath = os.path.join(folder, "stderr.txt")
        child = mp_context(start_method).Process(target=_allocate_with_limit, args=(spare_mb, want_mb, kind, errpath))
        child.start()
        child.join(_WAIT)
        if child.is_alive():
            child.kill()
            child.join(5)
        with open(errpath) as f:
            error = error_line(f.read())
        if "DefaultCPUAllocator" in error:  # drop torch's "[enforce fail at <file>:<line>]" prefix
            error = "RuntimeError: " + error[error.index("DefaultCPUAllocator") :]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {"exit code": child.exitcode, "error": error}


def _grow(go: Any, grown: Any, step_mb: int, max_mb: int, stepped: Any = None) -> None:
    """Process target: once `go` is released, grow by `step_mb` of touched memory at a time up to
    `max_mb`, recording the total in `grown`. In lock-step with a watcher: after each step it releases
    `stepped` and waits for `go` again, so the watcher reads the memory after every step however busy
    the machine is (with a fixed pace, a watcher descheduled for 70 ms missed the last seven steps)."""
    if not go.acquire(timeout=_WAIT):
        return
    chunks = []
    while grown.value + step_mb <= max_mb:
        chunks.append(b"\x01" * (step_mb * _MB))  # written, so the pages are really used
        grown.value += step_mb
        if stepped is None:
            time.sleep(0.01)
            continue
        stepped.release()
        if not go.acquire(timeout=_WAIT):
            return


def memory_cgroup_parent() -> str | None:
    """This process's cgroup v1 memory folder, or a cgroup v2 folder with the memory controller, if we
    may make child groups in it (root, usually); else None."""
    try:
        lines = open("/proc/self/cgroup").read().splitlines()  # noqa: SIM115 - tiny
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = os.path.join("/sys/fs/cgroup/memory", path.lstrip("/"))
            if os.path.exists(os.path.join(folder, "memory.limit_in_bytes")) and os.access(folder, os.W_OK):
                return folder
        if controllers == "":
            folder = os.path.join("/sys/fs/cgroup", path.lstrip("/"))
            control = os.path.join(folder, "cgroup.subtree_control")
            if os.path.exists(control) and "memory" in open(control).read().split() and os.access(folder, os.W_OK):  # noqa: SIM115
                return folder
    return None


def _make_memory_cgroup(limit_mb: int) -> str | None:
    """A child memory cgroup limited to `limit_mb` (and no swap), or None where we cannot make one."""
    parent = memory_cgroup_parent()
    if parent is None:
        return None
    folder = os.path.join(parent, f"course-oom-{os.getpid()}")
    try:
        os.mkdir(folder)
        if os.path.exists(os.path.join(folder, "memory.limit_in_bytes")):  # v1
            Path(folder, "memory.limit_in_bytes").write_text(str(limit_mb * _MB))
            with contextlib.suppress(OSError):  # only where swap is accounted
                Path(folder, "memory.memsw.limit_in_bytes").write_text(str(limit_mb * _MB))
        else:  # v2
            Path(folder, "memory.max").write_text(str(limit_mb * _MB))
            with contextlib.suppress(OSError):
                Path(folder, "memory.swap.max").write_text("0")
    except OSError:
        _remove_cgroup(folder)
        return None
    return folder


def _remove_cgroup(folder: str) -> None:
    """rmdir the cgroup; the kernel may need a moment after the last process in it was reaped."""
    deadline = time.monotonic() + 5
    while os.path.isdir(folder):
        try:
            os.rmdir(folder)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def kernel_log_says_oom(pid: int) -> bool | None:
    """Whether the kernel log reports an OOM kill of `pid`; None where we may not read it (not root)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    found = False
    try:
        while True:
            try:
                record = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:
                break
            except OSError:  # a record overwritten while reading (EPIPE): go on
                continue
            found = found or (f"Killed process {pid} " in record and "out of memory" in record.lower())
    finally:
        os.close(fd)
    return found


@dataclass
class OomRun:
    """One out-of-memory demo: `exitcode`, MB the child had grown to, its RSS readings (MB) while it grew,
    and who killed it ("the kernel (memory cgroup)" or "a watcher in this process")."""

    exitcode: int | None
    limit_mb: int
    grown_mb: int
    rss_mb: list[float]
    killer: str
    pid: int


def oom_kill(limit_mb: int = 64, step_mb: int = 4, use_cgroup: bool = True, start_method: str | None = None) -> OomRun:
    """Let a child grow past `limit_mb` and see it killed with SIGKILL, as the OOM killer does.

    Where a child memory cgroup can be made (root on Linux), the kernel's OOM killer does it; elsewhere a
    watcher here sends the same SIGKILL once the child's RSS grew past the limit (what a user-space OOM
    killer like earlyoom or systemd-oomd does); `use_cgroup=False` forces that path. The child stops by
    itself at 4 x the limit.
    """
    import signal

    import psutil

    positive_int("limit_mb", limit_mb, minimum=16)
    positive_int("step_mb", step_mb)
    ctx = mp_context(start_method)
    go, stepped, grown = ctx.Semaphore(0), ctx.Semaphore(0), ctx.Value("i", 0, lock=False)
    child = ctx.Process(target=_grow, args=(go, grown, step_mb, 4 * limit_mb, stepped))
    if not isinstance(use_cgroup, bool):
        raise TypeError(f"use_cgroup must be a bool, got {type(use_cgroup).__name__}")
    cgroup = _make_memory_cgroup(limit_mb) if use_cgroup else None
    readings: list[float] = []
    try:
        child.start()
        watched = psutil.Process(child.pid)
        if cgroup is not None:
            try:
                Path(cgroup, "cgroup.procs").write_text(str(child.pid))
            except OSError:  # the kernel refused the move (cgroup v2 allows it only within a delegated tree)
                _remove_cgroup(cgroup)
                cgroup = None
        start_rss = watched.memory_info().rss
        go.release()
        deadline = time.monotonic() + _WAIT
        while child.is_alive() and time.monotonic() < deadline:
            if not stepped.acquire(timeout=0.05):
                continue  # still growing, or dead (the loop then ends)
            with contextlib.suppress(psutil.Error):
                rss = watched.memory_info().rss - start_rss
                readings.append(rss / _MB)
                if cgroup is None and rss > limit_mb * _MB:
                    os.kill(child.pid, signal.SIGKILL)
            go.release()  # the next step
        if child.is_alive():
            child.kill()
        child.join(5)
    finally:
        if cgroup is not None:
            _remove_cgroup(cgroup)
    killer = "a watcher in this process" if cgroup is None else "the kernel (memory cgroup)"
    return OomRun(child.exitcode, limit_mb, grown.value, readings, killer, child.pid)


# ---- the table of section "When a worker dies" -------------------------------------------------------

DEATH_COLUMNS = ("API", "what the parent gets", "names the signal", "afterwards")


def death_rows(
    pool_run: dict[str, Any], executor_run: dict[str, Any], loader_run: dict[str, str], spawn_run: dict[str, Any]
) -> list[tuple[str, str, str, str]]:
    """One row per API, built from what the demos returned (`pool_after_kill`, `executor_after_kill`,
    `loader_after_kill`, `spawn_after_kill`), plus torchrun's row, which notebook 07 demonstrates."""
    for name, run in (
        ("pool_run", pool_run),
        ("executor_run", executor_run),
        ("loader_run", loader_run),
        ("spawn_run", spawn_run),
    ):
        if not isinstance(run, dict):
            raise TypeError(f"{name} must be the dict its demo returned, got {type(run).__name__}")
    try:
        timed_out = next(v for k, v in pool_run.items() if k.startswith("map_async"))
        pool_gets = "nothing: map() waits forever" if timed_out else "its result (unexpected)"
        if timed_out:
            pool_gets += ", map_async(...).get(t) raises TimeoutError"
        pool_after = "worker replaced, pool still works" if pool_run["the killed worker was replaced"] else "?"
        executor_gets = f"{executor_run['their error'].split(':')[0]} on {executor_run['futures that failed']} futures"
        executor_after = "broken: a new submit raises " + executor_run["a new submit"].split(":")[0]
        loader_gets = f"{loader_run['raised']}, from {loader_run['raised from']}"
        spawn_gets = spawn_run["raised"]
        spawn_after = "the other ranks get SIGTERM" if -15 in spawn_run["exit codes"] else "?"
    except (KeyError, StopIteration, AttributeError) as exc:
        raise ValueError(f"a run lacks a field its demo returns: {exc}") from None
    killed_by = "killed by signal" in loader_run["raised from"]
    return [
        ("multiprocessing.Pool", pool_gets, "no", pool_after),
        ("ProcessPoolExecutor", executor_gets, "no", executor_after),
        ("DataLoader", loader_gets, "yes (the cause)" if killed_by else "no", "the loop (epoch) ends with it"),
        ("torch.multiprocessing.spawn", spawn_gets, "yes" if spawn_run.get("signal_name") else "no", spawn_after),
        (
            "torchrun",
            "the agent sees the rank's exit code -9",
            "yes (exit code)",
            "stops every rank; --max-restarts restarts the whole group (notebook 07, section 6)",
        ),
    ]


def death_table(rows: Sequence[tuple[str, ...]]) -> str:
    """The rows as a plain-text table, one API per block (wide cells would not fit side by side)."""
    if not rows or any(len(row) != len(DEATH_COLUMNS) for row in rows):
        raise ValueError(f"rows must be a non-empty list of {len(DEATH_COLUMNS)}-tuples (see DEATH_COLUMNS)")
    width = max(len(column) for column in DEATH_COLUMNS[1:])
    blocks = []
    for row in rows:
        lines = [row[0]] + [
            f"  {column:<{width}}  {value}" for column, value in zip(DEATH_COLUMNS[1:], row[1:], strict=True)
        ]
        blocks.append("\n".join(lines))
    return "\n".join(blocks)
