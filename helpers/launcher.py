"""Start ranks of a gloo process group on this machine, loopback only, and clean up after them: the plumbing
that chapters 05, 06 and 07 share (chapter 05 explains each piece).

- `launch(demos, world_size)`: start the ranks (the platform's default start method unless told), join
  one process group, run functions `fn(rank, world_size, **kw)` one after another in every rank, and
  return `{rank: {name: result}}`. `failures="report"` waits for every rank and says how each ended.
- `free_port`, `listener`, `loopback_store`, `init_group`: a rendezvous that listens on 127.0.0.1 only. torch's
  `TCPStore` listens on every interface whatever `MASTER_ADDR` says, so rank 0 binds the socket itself
  and hands it over (`master_listen_fd`); gloo is pinned to loopback with `GLOO_SOCKET_IFNAME=lo`.
- `isolated`, `isolation_available`: run a command in a private network namespace (`unshare -Urn`, only
  loopback inside) where Linux allows it, so a wildcard listener never faces a real network.
- `torchrun_standalone`, `torchrun_two_nodes`: torchrun jobs (one "machine", or two "nodes" on this one)
  in such a namespace, with `TMPDIR` in a folder removed afterwards; each rank writes `rank<RANK>.json`.
- `kill_tree`, `listening_addresses`, `describe_error`: kill a process and its descendants; where a
  process listens; a distributed error in one stable line.

Conventions: ranks never print, they return results (a file per rank, read back by the parent); every
wait has a timeout; every process group is destroyed, every listener closed and every process joined
before a function returns; nothing is left in the temporary folder.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import functools
import glob
import json
import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from helpers.environment import default_start_method
from helpers.errors import clean, error_line, short_error
from helpers.processes import join_spawned, remove_error_files, stop
from helpers.validate import non_negative, positive_int
from helpers.watchdog import FAULTHANDLER_FRAME

__all__ = [
    "LOOPBACK",
    "free_port",
    "listener",
    "check_rank",
    "check_port",
    "loopback_store",
    "init_group",
    "launch",
    "rank_main",
    "demo_names",
    "listening_addresses",
    "isolation_available",
    "isolated",
    "kill_tree",
    "TorchrunJob",
    "torchrun_standalone",
    "torchrun_two_nodes",
    "describe_error",
]

LOOPBACK = "127.0.0.1"

# torch.multiprocessing logs "Terminating process N via signal SIGTERM" with a pid and a time when a rank
# fails and the others are stopped; the launcher reports the failure itself.
logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)


# ----------------------------------------------------------------------------------------------- setup
def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago: bind port 0 there, read the port, close.

    Asking the OS instead of hard-coding 29500 is what makes a cell re-runnable: a fixed port fails
    with EADDRINUSE while another listener holds it (a job still running, a colleague's, a kernel that
    kept its store). A port left in TIME_WAIT by the last run is no obstacle: a new `TCPStore` binds
    it at once (notebook 05 checks it). Between the close and the store's own bind, though, another
    program may take the port; `listener` closes that window, and `launch` uses it. This function is
    for programs that bind the port themselves (torchrun).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def listener() -> socket.socket:
    """A socket already listening on 127.0.0.1, on a port the OS picks: the store's socket, made before
    any rank starts and handed to rank 0 (the others learn its port).

    With `free_port` the port is free only until it is closed: two jobs started at the same moment can
    be given the same port, and then one job's ranks join the other's store. A socket that listens from
    the start cannot be given to anyone else, and other ranks that connect before rank 0 is up simply
    wait in its queue.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((LOOPBACK, 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def check_rank(rank: Any, world_size: Any) -> tuple[int, int]:
    """Validate a (rank, world_size) pair before anything starts: a wrong one would otherwise hang a
    rendezvous that waits for ranks which never come."""
    world_size = positive_int("world_size", world_size)
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f"rank must be an int, got {type(rank).__name__}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in 0..{world_size - 1} for world_size {world_size}, got {rank}")
    return rank, world_size


def check_port(port: Any) -> int:
    """A TCP port number 1..65535, or a clear error naming `port`."""
    port = positive_int("port", port)
    if port > 65535:
        raise ValueError(f"port must be <= 65535, got {port}")
    return port


def loopback_store(
    rank: int, world_size: int, port: int, timeout: float = 30.0, listen_socket: socket.socket | None = None
) -> Any:
    """A `TCPStore` that listens on 127.0.0.1 only.

    Rank 0 hands the store a socket bound to 127.0.0.1 (`master_listen_fd`): `listen_socket` when given
    (see `listener`), else one it binds to `port` now; left to itself, the store would listen on all
    interfaces. The other ranks connect to 127.0.0.1:port and retry until rank 0 is up or `timeout` passes.
    """
    import torch.distributed as dist

    rank, world_size = check_rank(rank, world_size)
    port = check_port(port)
    wait = datetime.timedelta(seconds=timeout)
    if rank != 0:
        return dist.TCPStore(LOOPBACK, port, world_size, False, wait)
    if listen_socket is not None:
        if not isinstance(listen_socket, socket.socket):
            raise TypeError(f"listen_socket must be a socket.socket, got {type(listen_socket).__name__}")
        if listen_socket.getsockname()[1] != port:
            raise ValueError(f"listen_socket listens on port {listen_socket.getsockname()[1]}, not {port}")
        return dist.TCPStore(LOOPBACK, port, world_size, True, wait, master_listen_fd=listen_socket.detach())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOOPBACK, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return dist.TCPStore(LOOPBACK, port, world_size, True, wait, master_listen_fd=sock.detach())


def init_group(
    rank: int,
    world_size: int,
    port: int | None = None,
    init_file: str | None = None,
    timeout: float = 30.0,
    listen_socket: socket.socket | None = None,
) -> None:
    """Join the default gloo process group on this machine, loopback only.

    Exactly one of `port` (a store on 127.0.0.1, see `loopback_store`; rank 0 may bring the store's
    `listen_socket`, see `listener`) and `init_file` (`file://`
    rendezvous through a file every rank can see and lock, torch's FileStore takes flock locks; nothing
    listens for it; a fresh file for every group) is given. `GLOO_SOCKET_IFNAME=lo` keeps gloo's own connections on the
    loopback device; without it gloo binds to whatever address the host name resolves to.

    It returns on every rank only once every rank has joined (a barrier): in gloo's connection setup one
    side of each pair is done as soon as it has connected, before the other side has finished accepting.
    A rank that then ran a demo without a collective and left closed the connection, or the store, that
    the other rank was still setting up with ("Gloo connectFullMesh failed ... Connection closed by peer",
    or "Failed to recv, got 0 bytes" from the store): 42 of 4,000 launches of such a demo failed so, four
    at a time with eight busy loops on 2 cores, and none of 4,000 with the barrier.
    """
    import torch.distributed as dist

    rank, world_size = check_rank(rank, world_size)
    if (port is None) == (init_file is None):
        raise ValueError("give exactly one of port and init_file")
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    wait = datetime.timedelta(seconds=timeout)
    if init_file is not None:
        dist.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size, timeout=wait
        )
    else:
        store = loopback_store(rank, world_size, check_port(port), timeout, listen_socket)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=wait)
    dist.barrier()


# -------------------------------------------------------------------------------------------- launcher
def _name(fn: Callable[..., Any]) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", "demo")


def demo_names(demos: Sequence[Callable[..., Any]] | Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """`{name: function}` for `launch`: a mapping as given, a list named by each function's `__name__`.
    Raises TypeError/ValueError for anything `launch` could not run or would report ambiguously."""
    if isinstance(demos, (str, bytes)) or not isinstance(demos, (Sequence, Mapping)) or not demos:
        raise TypeError("demos must be a non-empty list of functions or a dict of name -> function")
    named = dict(demos) if isinstance(demos, Mapping) else {_name(fn): fn for fn in demos}
    if not isinstance(demos, Mapping) and len(named) != len(demos):
        raise ValueError("two demos share a name: pass a dict of name -> function instead")
    for name, fn in named.items():
        if not isinstance(name, str) or not callable(fn):
            raise TypeError(f"a demo must be a function fn(rank, world_size, **kw), got {type(fn).__name__}")
    return named


def _run_demos(rank: int, world_size: int, demos: dict[str, Any], outdir: str, kwargs: dict[str, Any]) -> None:
    """Run the demos in this rank (its group already joined), saving the results after each one, so that
    a rank killed later still reports what it had done."""
    results: dict[str, Any] = {}
    path = os.path.join(outdir, f"rank{rank}.pickle")
    for name, fn in demos.items():
        results[name] = fn(rank, world_size, **kwargs.get(name, {}))
        with open(path + ".part", "wb") as f:
            pickle.dump(results, f)
        os.replace(path + ".part", path)


def rank_main(
    rank: int,
    world_size: int,
    demos: dict[str, Callable[..., Any]],
    port: int | None,
    init_file: str | None,
    outdir: str,
    threads: int = 1,
    env: dict[str, str] | None = None,
    kwargs: dict[str, Any] | None = None,
    listen_socket: socket.socket | None = None,
    group_timeout: float = 30.0,
) -> None:
    """What every launched rank runs: set its threads and environment, join the group, run the demos
    (results into `outdir/rank<r>.pickle`), destroy the group, and leave. Every rank receives the store's
    `listen_socket` (see `listener`), rank 0 serves on it, the others close their copy. Public for callers
    that start a rank themselves (e.g. a hang demo whose rank 0 runs in the process the watchdog watches).
    `group_timeout` is the group's timeout in seconds (`init_group`): how long a collective waits for a
    rank that never comes before it raises."""
    torch.set_num_threads(threads)  # first: a forked child of a kernel would hang in OpenMP otherwise
    _answer_stack_requests(outdir, rank)
    if listen_socket is not None and rank != 0:
        listen_socket.close()
        listen_socket = None
    env = dict(env or {})
    os.environ.update(env)
    import torch.distributed as dist

    if "TORCH_DISTRIBUTED_DEBUG" in env:
        dist.set_debug_level_from_env()  # read once, at import: a forked child inherits the parent's level

    try:
        init_group(rank, world_size, port=port, init_file=init_file, listen_socket=listen_socket, timeout=group_timeout)
    except RuntimeError as exc:  # torch's distributed errors (DistError and its kinds) are RuntimeErrors
        Path(outdir, f"rank{rank}.setup-failed").write_text(str(exc))  # `launch` starts the group again
        raise
    try:
        _run_demos(rank, world_size, demos, outdir, dict(kwargs or {}))
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    # A workaround, not a pattern for real jobs: leave without the interpreter's teardown (forked
    # children leave this way anyway). In torch 2.13 a gloo worker thread, still running after
    # destroy_process_group, can free a collective started in a backward pass (it holds a Python object)
    # after the teardown has begun, which aborts the process (SIGABRT; see helpers/scripts/__init__.py).
    # The results are written and closed; nothing else here needs atexit handlers.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _answer_stack_requests(outdir: str, rank: int) -> None:
    """On SIGUSR1, write every thread's Python stack to `outdir/rank<r>.stacks` (appending: the DataLoader
    workers this rank forks inherit the handler and the file, and answer the same request)."""
    stacks = open(os.path.join(outdir, f"rank{rank}.stacks"), "a")  # noqa: SIM115 - lives as long as the rank
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    _STACK_FILES.append(stacks)  # keep it open


_STACK_FILES: list[Any] = []


def _exit_text(exitcode: int | None) -> str:
    """How a rank process ended, in words: 'killed by SIGABRT', 'exit code 1'."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def _join_all(
    context: Any, timeout: float, on_timeout: Callable[[], None], failed: Callable[[], list[int]]
) -> list[int | None]:
    """Wait for every rank to end on its own (no stopping the others when one fails, unlike
    `ProcessContext.join`), for `timeout` seconds in all; then call `on_timeout`, kill what is left and
    raise `TimeoutError`. Once `failed()` names ranks whose setup failed, the others would only wait for
    them: let the failed ranks finish exiting (they are raising: their exit code is the report), then
    stop the rest at once."""
    from multiprocessing.connection import wait

    deadline = time.monotonic() + timeout
    while (alive := [p for p in context.processes if p.is_alive()]) and time.monotonic() < deadline:
        if ranks := failed():
            for rank in ranks:  # it wrote its note just before raising; its own exit follows
                context.processes[rank].join(max(0.0, min(_FAILED_RANK_EXIT_S, deadline - time.monotonic())))
            return stop(context.processes, timeout=0)
        wait([p.sentinel for p in alive], timeout=min(0.05, max(0.0, deadline - time.monotonic())))
    hung = any(process.is_alive() for process in context.processes)
    if hung:
        on_timeout()
    codes = stop(context.processes, timeout=0)  # kills what is left, joins everything
    if hung:
        raise TimeoutError(f"spawned processes still running after {timeout:g} s")
    return codes


_FAILED_RANK_EXIT_S = 10.0  # a rank between its setup-failed note and its exit only writes torch's error file


def _dump_stacks(context: Any, hung: list[int], outdir: str) -> None:
    """Ask every rank still running, and then each of its children (DataLoader workers), for their Python
    stacks, one process after another so that they do not interleave, and note which ranks were still
    running, before they are all killed. Each answer goes under a heading in `outdir/rank<r>.stacks`."""
    import psutil

    for rank, process in enumerate(context.processes):
        if not process.is_alive():
            continue
        hung.append(rank)
        try:
            children = psutil.Process(process.pid).children(recursive=True)
        except psutil.Error:
            children = []
        for pid, role in [(process.pid, f"rank {rank}"), *((c.pid, f"rank {rank}'s child") for c in children)]:
            with open(os.path.join(outdir, f"rank{rank}.stacks"), "a") as f:
                f.write(f"{_STACK_HEADING}{role}, pid {pid}\n")
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGUSR1)
            time.sleep(0.5)  # let it write


def _stop_hung(context: Any, hung: list[int], outdir: str) -> None:
    """What `launch` does when its time is up: take the stacks of the ranks still running and of their
    children, then kill those children (a DataLoader worker busy in its dataset does not notice that its
    rank has gone, and would outlive the launch). The ranks themselves are left to `stop`: only their
    parent may reap them, or multiprocessing would think them still running."""
    import psutil

    _dump_stacks(context, hung, outdir)
    for rank in hung:
        with contextlib.suppress(psutil.Error):
            below = psutil.Process(context.processes[rank].pid).children(recursive=True)
            for child in below:
                with contextlib.suppress(psutil.Error):
                    child.kill()
            psutil.wait_procs(below, timeout=5)


_STACK_HEADING = "=== stacks of "


def _stack_summary(outdir: str, hung: Sequence[int], frames: int = 6) -> str:
    """The innermost `frames` frames of the thread each hung process was running when asked (faulthandler's
    "Current thread"), one line per process: enough to see where a hang sits in a log that shows only the
    error message (nbval shows no stream output of a failing cell)."""
    lines = []
    for rank in hung:
        path = os.path.join(outdir, f"rank{rank}.stacks")
        text = Path(path).read_text(errors="replace") if os.path.exists(path) else ""
        for section in text.split(_STACK_HEADING)[1:]:
            heading, _, body = section.partition("\n")
            current = body.split("Current thread", 1)[1] if "Current thread" in body else ""
            found = [FAULTHANDLER_FRAME.match(line) for line in current.splitlines()[1:]]
            calls = []
            for match in found:
                if match is None:
                    break
                calls.append(f"{match.group(3)} ({os.path.basename(match.group(1))}:{match.group(2)})")
            lines.append(f"{heading}: {' < '.join(calls[:frames]) or 'no stack (it did not answer)'}")
    return "\n".join(lines)


def _progress(outdir: str, names: Sequence[str], hung: Sequence[int]) -> str:
    """Where each rank that had to be killed was: after which demo, in which one, or leaving."""
    parts = []
    for rank in hung:
        path = os.path.join(outdir, f"rank{rank}.pickle")
        done = 0
        if os.path.exists(path):
            with open(path, "rb") as f, contextlib.suppress(Exception):
                done = len(pickle.load(f))
        where = f"in {names[done]!r}" if done < len(names) else "leaving (destroy_process_group or exit)"
        parts.append(f"rank {rank} had finished {done} of {len(names)} demos and was {where}")
    return "; ".join(parts)


def _interactive_main() -> bool:
    """True in a notebook or a REPL: their `__main__` has no file a spawned child could re-import."""
    return getattr(sys.modules.get("__main__"), "__file__", None) is None


def _check_importable(demos: dict[str, Callable[..., Any]], method: str) -> None:
    """Under spawn and forkserver a child re-imports each function by module and name: a function
    defined in a notebook cell cannot arrive (the child would fail with an AttributeError)."""
    if method == "fork" or not _interactive_main():
        return
    for name, fn in demos.items():
        inner = fn.func if isinstance(fn, functools.partial) else fn
        if getattr(inner, "__module__", None) == "__main__":
            raise ValueError(
                f"demo {name!r} is defined in the notebook, which {method} children cannot import: "
                "define it in a module, or pass start_method='fork'"
            )


def _note_other_failures(exc: BaseException, context: Any) -> None:
    """torch re-raises one failed rank: the lowest-numbered among those that had exited when it looked,
    which on a busy machine need not be the one that failed first (its peers then fail too, "closed by
    peer"). Add every other rank's error to the traceback as a note, oldest first, so the root cause is
    always in sight. (`str(exc)` is unchanged: notes are shown only with the traceback, Python 3.11+.)"""
    if not hasattr(exc, "add_note"):
        return
    others = []
    for rank, path in enumerate(context.error_files):
        if rank == getattr(exc, "error_index", None):
            continue
        try:
            written = os.stat(path).st_mtime
            with open(path, "rb") as f:
                trace = str(pickle.load(f)).strip()
        except (OSError, EOFError, pickle.UnpicklingError):
            continue  # this rank wrote no error file: it did not raise
        others.append((written, rank, trace.splitlines()[-1] if trace else "(no traceback)"))
    for _, rank, last_line in sorted(others):
        exc.add_note(f"rank {rank} failed too: {last_line}")


def launch(
    demos: Sequence[Callable[..., Any]] | Mapping[str, Callable[..., Any]],
    world_size: int = 2,
    *,
    init: str = "store",
    timeout: float = 60.0,
    start_method: str | None = None,
    threads: int = 1,
    env: dict[str, str] | None = None,
    kwargs: dict[str, dict[str, Any]] | None = None,
    tmpdir: str | None = None,
    failures: str = "raise",
    group_timeout: float = 30.0,
) -> dict[int, dict[str, Any]]:
    """Start `world_size` ranks in one process group, run the `demos` (functions
    `fn(rank, world_size, **kwargs[name])`, a list named by `__name__` or a dict name -> function) one
    after another in every rank, and return `{rank: {name: result}}`.

    Under spawn and forkserver (the default on macOS and Windows, and on Linux from Python 3.14) every
    function must live in a module; a function defined in a notebook needs `start_method="fork"`.
    One launch runs several demos because each launch costs a process start (1-2.5 s under spawn).
    `init` is "store" (a TCPStore on 127.0.0.1, on a socket that listens before the ranks start, see
    `listener`) or "file" (`file://`).
    `failures="raise"`: a rank that raises stops the others and its error is re-raised here
    (`ProcessRaisedException`). `failures="report"`: every rank runs to its end, and a rank that did not
    exit cleanly gets the key "exit" ("killed by SIGABRT", "exit code 1") next to the results of the
    demos it finished; for demos that break the group on purpose, where gloo may abort the process
    instead of raising. Nothing waits longer than `timeout` seconds (then `TimeoutError`). The results
    and the rendezvous file go into a temporary folder (made inside `tmpdir` when given: a caller that may
    be killed passes a folder it removes); torch's error files are removed after the join. When a rank's
    `init_process_group` fails (see `_ATTEMPTS`), the group is started again (up to twice), within the
    same `timeout`. `group_timeout` (seconds) is the process group's own timeout: a collective that waits
    longer for a peer raises in the rank instead of waiting for `timeout`.
    """
    world_size = positive_int("world_size", world_size)
    threads = positive_int("threads", threads)
    if init not in ("store", "file"):
        raise ValueError(f"init must be 'store' or 'file', got {init!r}")
    if failures not in ("raise", "report"):
        raise ValueError(f"failures must be 'raise' or 'report', got {failures!r}")
    named = demo_names(demos)
    method = start_method or default_start_method()
    _check_importable(named, method)
    deadline = time.monotonic() + timeout
    group_timeout = non_negative("group_timeout", group_timeout)
    if group_timeout == 0:
        raise ValueError("group_timeout must be > 0 seconds")
    run = (named, world_size, init, method, threads, dict(env or {}), dict(kwargs or {}), failures, group_timeout)
    for attempt in range(1, _ATTEMPTS + 1):
        with tempfile.TemporaryDirectory(prefix="ddp-", dir=tmpdir) as outdir:
            last = attempt == _ATTEMPTS
            with contextlib.suppress(_SetupFailed):
                return _launch_once(*run, outdir, max(0.0, deadline - time.monotonic()), timeout, retry=not last)
    raise AssertionError("the last attempt raises or returns")


# Joining the group used to fail now and then on a busy machine, on loopback too: in gloo's connection
# setup ("Gloo connectFullMesh failed ... Connection closed by peer", a few times in a thousand launches
# with 6 test processes on 2 cores; torch's own tests met it, pytorch/pytorch#53270), or while gloo
# exchanges its addresses through the store ("DistNetworkError: Failed to recv, got 0 bytes"). One rank
# saw it and the other went on. Its cause was a rank leaving while the other still set up (see
# `init_group`, whose barrier ended it in 4,000 launches). Should a rank's setup still fail, the group
# never formed as a whole, so `launch` discards what any rank did and starts the whole group again, up to
# twice; a third failure is raised (or reported).
# Only RuntimeErrors count (torch's distributed errors are): a TypeError or ValueError is a mistake in the
# call, which another start would repeat.
_ATTEMPTS = 3


class _SetupFailed(Exception):
    """A rank's `init_process_group` failed (see `_ATTEMPTS`)."""


def _launch_once(
    named: dict[str, Callable[..., Any]],
    world_size: int,
    init: str,
    method: str,
    threads: int,
    env: dict[str, str],
    kwargs: dict[str, dict[str, Any]],
    failures: str,
    group_timeout: float,
    outdir: str,
    timeout: float,
    total: float,
    retry: bool,
) -> dict[int, dict[str, Any]]:
    """One start of the group, for `launch`. With `retry`, `_SetupFailed` when a rank failed to join the group;
    without, that failure is raised or reported like any other."""
    import torch.multiprocessing as tmp

    sock = listener() if init == "store" else None
    port = sock.getsockname()[1] if sock is not None else None
    init_file = os.path.join(outdir, "rendezvous") if init == "file" else None
    args = (world_size, named, port, init_file, outdir, threads, env, kwargs, sock)
    target = functools.partial(rank_main, group_timeout=group_timeout)  # a partial of a module function pickles
    try:
        context = tmp.start_processes(target, args=args, nprocs=world_size, join=False, start_method=method)
    finally:
        if sock is not None:
            sock.close()  # every rank has its own copy now; rank 0 serves on it
    hung: list[int] = []
    on_timeout = functools.partial(_stop_hung, context, hung, outdir)
    setup_failed = functools.partial(_setup_failed_ranks, outdir)
    try:
        if failures == "raise":
            join_spawned(context, timeout, on_timeout)
            codes: list[int | None] = [0] * world_size
        else:  # a rank whose setup failed leaves the others waiting for it: stop them
            codes = _join_all(context, timeout, on_timeout, failed=setup_failed)
    except (tmp.ProcessRaisedException, tmp.ProcessExitedException) as exc:
        if retry and setup_failed():
            raise _SetupFailed(str(exc)) from exc
        _note_other_failures(exc, context)
        raise
    except TimeoutError:
        where = _progress(outdir, list(named), hung)
        stacks = _stack_summary(outdir, hung)
        raise TimeoutError(
            f"spawned processes still running after {total:g} s: {where}; innermost call first:\n{stacks}"
        ) from None
    finally:
        remove_error_files(context)
    if retry and setup_failed():
        raise _SetupFailed("a rank failed to join the group")
    results: dict[int, dict[str, Any]] = {}
    for rank in range(world_size):
        path = os.path.join(outdir, f"rank{rank}.pickle")
        results[rank] = {}
        if os.path.exists(path):
            with open(path, "rb") as f:
                results[rank] = pickle.load(f)
        if codes[rank] != 0:
            results[rank]["exit"] = _exit_text(codes[rank])
    return results


def _setup_failed_ranks(outdir: str) -> list[int]:
    """The ranks that failed to join the group (each wrote `rank<r>.setup-failed`, see `rank_main`)."""
    names = glob.glob(os.path.join(outdir, "rank*.setup-failed"))
    return sorted(int(os.path.basename(n)[len("rank") : -len(".setup-failed")]) for n in names)


def describe_error(exc: BaseException) -> str:
    """A distributed error in one stable line. Gloo's messages carry a source path, an address and a
    port, and a lost peer is reported as "closed" or "reset" depending on timing: keep what matters."""
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    if "by peer" in text:
        return f"{name}: the connection to another rank was lost (closed/reset by peer)"
    if "Detected mismatch between collectives" in text:
        return f"{name}: Detected mismatch between collectives on ranks"
    if "EADDRINUSE" in text or "address already in use" in text:
        return f"{name}: address already in use"
    return short_error(exc)


# ------------------------------------------------------------------------------------- listener checks
def listening_addresses(pid: int | None = None, tree: bool = True) -> list[str]:
    """The local addresses on which `pid` (default: this process) and, with `tree`, its children listen
    for TCP connections, as 'address' strings without ports (ports change every run)."""
    import psutil

    root = psutil.Process(pid)
    procs = [root, *(root.children(recursive=True) if tree else [])]
    found = set()
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            for conn in proc.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    found.add(conn.laddr.ip)
    return sorted(found)


# --------------------------------------------------------------------------------------- isolation
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1

# Run first inside the new namespace: bring `lo` up (what `ip link set lo up` does, with one ioctl), then
# become the command. Standard library only: importing this module would import torch (1.5 s) for nothing.
_ENTER = f"""
import fcntl, os, socket, struct, sys
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    request = struct.pack("16sH", b"lo", 0)
    flags = struct.unpack("16sH", fcntl.ioctl(sock.fileno(), {_SIOCGIFFLAGS}, request)[:18])[1]
    fcntl.ioctl(sock.fileno(), {_SIOCSIFFLAGS}, struct.pack("16sH", b"lo", flags | {_IFF_UP}))
os.execvp(sys.argv[1], sys.argv[1:])
"""


@functools.lru_cache(maxsize=1)
def isolation_available() -> bool:
    """True when this Linux lets an ordinary user create a private network namespace (`unshare -Urn`).
    Ubuntu's AppArmor rules, Docker and macOS often do not: then commands run as they would anyway."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(
            ["unshare", "-Urn", sys.executable, "-c", _ENTER, "true"], capture_output=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _run(command: Sequence[str], timeout: float, env: dict[str, str | None] | None) -> tuple[int, str, str]:
    """Run `command` (in a private network namespace when available) with the environment changed by
    `env`; (exit code, stdout, stderr). Its whole tree is killed after `timeout` s: `TimeoutError`."""
    if isinstance(command, str) or not command:
        raise TypeError("command must be a non-empty list of strings")
    prefix = ["unshare", "-Urn", sys.executable, "-c", _ENTER] if isolation_available() else []
    proc = subprocess.Popen(
        [*prefix, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None},
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.communicate()
        raise TimeoutError(f"{Path(command[0]).name} did not finish within {timeout:g} s") from None
    return proc.returncode, out, err


def isolated(command: Sequence[str], timeout: float = 60.0, env: dict[str, str | None] | None = None) -> str:
    """Run `command` (inside a private network namespace whose only interface is loopback, when
    available) and return its stdout; its whole process tree is killed after `timeout` seconds
    (`TimeoutError`). `env` adds variables to this process's environment (None removes one).
    A non-zero exit raises `RuntimeError` with the cleaned error line of its output."""
    code, out, err = _run(command, timeout, env)
    if code != 0:
        error = RuntimeError(error_line(err + out) or f"exit code {code}")
        error.output = clean(err)  # type: ignore[attr-defined] - the whole story, for debugging
        raise error
    return out


def kill_tree(pid: int) -> None:
    """Kill a process and all its descendants, found before any is killed. torchrun starts its workers
    in sessions of their own, so a process-group kill misses them, and killing the agent first would
    leave them orphaned."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)


# ------------------------------------------------------------------------------------------ torchrun
@dataclass
class TorchrunJob:
    """What a torchrun job left: the ranks' result files, how it ended, and its cleaned error output."""

    results: list[dict[str, Any]]  # every rank<N>.json the script wrote into {results}, sorted by RANK
    returncode: int  # 0 when every node's torchrun exited cleanly
    error: str  # the root cause in one cleaned line ("" when the job succeeded)
    output: str  # torchrun's stderr, cleaned (paths, pids, times removed): the whole story for debugging
    seconds: float  # wall time of the job, start-up included


def _torchrun() -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run"]  # what the `torchrun` command runs


def _read_results(outdir: str) -> list[dict[str, Any]]:
    rows = [json.loads(p.read_text()) for p in sorted(Path(outdir).glob("rank*.json"))]
    return sorted(rows, key=lambda row: row.get("RANK", 0))


def _torchrun_env(tmp: str, env: dict[str, str | None] | None) -> dict[str, str | None]:
    # torchrun writes torchelastic_* folders and error files under TMPDIR; the caller removes tmp.
    # OMP_NUM_THREADS is removed so that torchrun sets it (to 1 with several processes per node) unless
    # the caller's env sets it.
    return {"TMPDIR": tmp, "GLOO_SOCKET_IFNAME": "lo", "LOGLEVEL": "ERROR", "OMP_NUM_THREADS": None, **(env or {})}


def _fill(args: Sequence[str], results: str, tmp: str, node: int = 0) -> list[str]:
    """The placeholders of script arguments and options: {results}, {tmp}, {node}."""
    if isinstance(args, str):
        raise TypeError("script_args and options must be lists of strings")
    return [str(a).replace("{results}", results).replace("{tmp}", tmp).replace("{node}", str(node)) for a in args]


def _job(
    build: Callable[[str, str], list[str]],
    timeout: float,
    env: dict[str, str | None] | None,
    failures: str,
) -> TorchrunJob:
    """Run the command `build(results, tmp)` with TMPDIR in a temporary folder removed afterwards."""
    if failures not in ("raise", "report"):
        raise ValueError(f"failures must be 'raise' or 'report', got {failures!r}")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="torchrun-") as tmp:
        results = os.path.join(tmp, "results")
        os.mkdir(results)
        code, _, err = _run(build(results, tmp), timeout, _torchrun_env(tmp, env))
        job = TorchrunJob(
            results=_read_results(results),
            returncode=code,
            error="" if code == 0 else (error_line(err) or f"exit code {code}"),
            output=clean(err),
            seconds=time.monotonic() - started,
        )
    if code != 0 and failures == "raise":
        error = RuntimeError(job.error)
        error.output = job.output  # type: ignore[attr-defined]
        raise error
    return job


def _check_script(script: Any) -> str:
    if not isinstance(script, (str, Path)) or not Path(script).is_file():
        raise ValueError(f"script must be the path of a Python file, got {script!r}")
    return str(script)


def torchrun_standalone(
    script: str | Path,
    script_args: Sequence[str] = ("{results}",),
    nproc: int = 2,
    *,
    options: Sequence[str] = (),
    timeout: float = 60.0,
    env: dict[str, str | None] | None = None,
    failures: str = "raise",
) -> TorchrunJob:
    """`torchrun --standalone --nproc-per-node nproc [options] script script_args` on this machine.

    In `script_args` and `options`, `{results}` becomes a folder into which each rank writes
    `rank<RANK>.json` (returned in `.results`, sorted by RANK) and `{tmp}` the job's temporary folder
    (TMPDIR; removed with everything torchrun left in it). torchrun's own output has run ids, ports and
    times: only its cleaned stderr is kept. `failures="raise"`: a failed job raises `RuntimeError` with
    the root cause; `"report"`: it is returned with `returncode` and `error`. Killed after `timeout` s.
    """
    script = _check_script(script)
    nproc = positive_int("nproc", nproc)

    def build(results: str, tmp: str) -> list[str]:
        head = [*_torchrun(), "--standalone", f"--nproc-per-node={nproc}", *_fill(options, results, tmp)]
        return [*head, script, *_fill(script_args, results, tmp)]

    return _job(build, timeout, env, failures)


_TWO_NODES = """
import json, subprocess, sys, time
import psutil
commands, timeout = json.loads(sys.argv[1]), float(sys.argv[2])
procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for c in commands]
deadline = time.monotonic() + timeout
errors = []
for p in procs:
    try:
        errors.append(p.communicate(timeout=max(0.1, deadline - time.monotonic()))[1])
    except subprocess.TimeoutExpired:
        errors.append("")
for p in procs:  # the agent and its workers (in sessions of their own): see kill_tree
    try:
        tree = [*psutil.Process(p.pid).children(recursive=True), psutil.Process(p.pid)]
    except psutil.NoSuchProcess:
        tree = []
    for proc in tree:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
for n, p in enumerate(procs):
    if p.returncode is None:
        errors[n] = "timed out\\n" + p.communicate()[1]
codes = [p.returncode for p in procs]
if any(codes):
    sys.stderr.write("\\n".join(f"node {n}: exit code {c}\\n{e}" for n, (c, e) in enumerate(zip(codes, errors))))
    sys.exit(1)
"""


def torchrun_two_nodes(
    script: str | Path,
    kind: str,
    script_args: Sequence[str] = ("{results}",),
    *,
    options: Sequence[str] = (),
    timeout: float = 40.0,
    env: dict[str, str | None] | None = None,
    failures: str = "raise",
) -> TorchrunJob:
    """Two torchrun "nodes" on this machine, one process each, meeting at 127.0.0.1 on a free port:
    `kind="c10d"` (dynamic rendezvous; ranks come from the sorted participants, so `--node-rank` is
    ignored) or `"static"` (`--node-rank`, `--master-addr`, `--master-port`). Both run in one private
    namespace so that they can meet. Placeholders as in `torchrun_standalone`, plus `{node}` (0 or 1).
    """
    if kind not in ("c10d", "static"):
        raise ValueError(f"kind must be 'c10d' or 'static', got {kind!r}")
    script = _check_script(script)
    port = free_port()

    def node_command(node: int, results: str, tmp: str) -> list[str]:
        base = [*_torchrun(), "--nnodes=2", "--nproc-per-node=1"]
        if kind == "c10d":
            base += ["--rdzv-backend=c10d", f"--rdzv-endpoint={LOOPBACK}:{port}", "--rdzv-id=course"]
        else:
            base += [f"--node-rank={node}", f"--master-addr={LOOPBACK}", f"--master-port={port}"]
        return [*base, *_fill(options, results, tmp, node), script, *_fill(script_args, results, tmp, node)]

    def build(results: str, tmp: str) -> list[str]:
        commands = [node_command(node, results, tmp) for node in (0, 1)]
        return [sys.executable, "-c", _TWO_NODES, json.dumps(commands), str(timeout)]

    return _job(build, timeout + 10, env, failures)
