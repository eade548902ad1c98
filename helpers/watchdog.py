"""Run something that may hang, crash or fail in a separate process, and always get control back.

Every hang demo of the course goes through `run` (a function) or `run_script` (a Python file). The child:

* is not daemonic, so the code under test may start processes of its own;
* leads its own process group, and on time-out the whole tree is killed: first every descendant found
  by psutil, then the group. A hung grandchild would otherwise outlive the cell and the kernel;
* writes its stdout and stderr (and its children's) to a file, never to the notebook, because what a
  child prints is recorded by a regeneration run but not seen by nbval, so such a cell could never pass;
* answers SIGUSR1 with a faulthandler dump of its stack, taken just before the kill. faulthandler works
  from a C signal handler, so it reports even a thread stuck inside native code holding the GIL;
* writes a fatal signal's stack (SIGSEGV, SIGABRT, ...) to the same file via `faulthandler.enable`.

The result is an `Outcome` whose one-line summary names functions, never paths, PIDs or times that vary:
"hung as expected: killed after 3.0 s, stuck in `Queue.get` <- `consumer`".
Linux and macOS only (process groups and POSIX signals).
"""

from __future__ import annotations

import ast
import contextlib
import faulthandler
import functools
import linecache
import multiprocessing as mp
import os
import pickle
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from helpers.environment import default_start_method
from helpers.errors import clean, error_line

__all__ = ["Outcome", "run", "run_script"]
# Also used by `helpers.diagnose`, which watches a learner's own script the same way: the process tree
# (is_alive, is_cleaner, wait_gone), shared-memory names (multiprocessing_names, remove_orphans) and
# faulthandler's stack format (FAULTHANDLER_BLOCK, FAULTHANDLER_FRAME, enclosing_qualname).

_STATUSES = ("returned", "raised", "hung", "died")
_EXPECTATIONS = (None, "return", "raise", "hang", "die")
_DUMP_GRACE = 3.0  # at most, seconds the child gets to write its stack after SIGUSR1 (it takes milliseconds)
_START_LIMIT = 60.0  # seconds a child may take to get ready: a spawn child on a busy machine imports helpers
READY = "main_thread.txt"  # the child's main thread's id, written once SIGUSR1 gives its stack
_SELF_DESTRUCT = 30.0  # a child orphaned by a dead kernel still ends this long after its time-out


@dataclass
class Outcome:
    """What happened to the watched child. `str(outcome)` is the stable one-line summary."""

    status: str  # "returned" | "raised" | "hung" | "died"
    timeout: float
    seconds: float  # wall time; varies, so the summary never shows it
    value: Any = None
    error: str = ""  # "Type: message", cleaned
    signal: str = ""  # e.g. "SIGSEGV" when status == "died"
    stack: list[str] = field(default_factory=list)  # qualified names, from the target inward
    stuck_in: list[str] = field(default_factory=list)  # the part of `stack` the summary shows
    stderr: str = ""  # what the child and its children wrote to stdout/stderr, cleaned
    killed: int = 0  # processes killed at the end (the child and its descendants)
    expect: str | None = None

    @property
    def stderr_error(self) -> str:
        """The error the captured output reports most often (e.g. a grandchild's traceback); '' when none.
        The most frequent rather than the last: processes killed at the end write errors of their own."""
        return error_line(self.stderr, pick="most_common")

    @property
    def as_expected(self) -> bool:
        """True when the status matches `expect` ("hang" ~ "hung", "raise" ~ "raised", ...)."""
        wanted = {"return": "returned", "raise": "raised", "hang": "hung", "die": "died"}
        return self.expect is not None and wanted[self.expect] == self.status

    def summary(self) -> str:
        where = " <- ".join(f"`{name}`" for name in self.stuck_in)
        if self.status == "hung":
            # how many processes were killed depends on the start method (resource tracker): not shown
            text = f"hung: killed after {self.timeout:.1f} s"
            text += f", stuck in {where}" if where else ""
        elif self.status == "raised":
            text = f"raised {self.error}" + (f" in {where}" if where else "")
        elif self.status == "died":
            text = f"died of {self.signal}" + (f" in {where}" if where else "")
        else:
            text = f"returned {_short_repr(self.value)}"
        if self.status != "hung" and self.stderr_error:
            text += f"; its output says: {self.stderr_error}"
        if self.expect is not None:
            if self.as_expected:
                text = text.replace(self.status, f"{self.status} as expected", 1)
            else:
                text = f"UNEXPECTED (wanted: {self.expect}): {text}"
        return text

    def __str__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.summary())


def _short_repr(value: Any, limit: int = 80) -> str:
    text = clean(repr(value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _check_common(timeout: Any, expect: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, got {type(timeout).__name__}")
    if not 0 < timeout <= 600:
        raise ValueError(f"timeout must be > 0 and <= 600 seconds, got {timeout}")
    if expect not in _EXPECTATIONS:
        raise ValueError(f"expect must be one of {_EXPECTATIONS}, got {expect!r}")
    if not hasattr(os, "killpg"):
        raise RuntimeError("helpers.watchdog needs POSIX process groups (Linux or macOS)")
    return float(timeout)


# --------------------------------------------------------------------------------------------------
# The child side


def _prepare_child(workdir: str) -> None:
    """Own process group, output to files, stacks on SIGUSR1 and on fatal signals."""
    os.setpgid(0, 0)
    out = os.open(os.path.join(workdir, "output.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    # A forked kernel child inherits ipykernel's stream objects, which would send text to the notebook.
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the child
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    trace = open(os.path.join(workdir, "trace.txt"), "w")  # noqa: SIM115
    _record_resources(workdir)
    _private_mp_temp_dir(workdir)
    faulthandler.enable(file=trace, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=trace, all_threads=True, chain=False)
    sys._watchdog_trace = trace  # type: ignore[attr-defined]  # keep the file object alive
    # written last: the parent starts the target's clock when it appears (see `_wait_ready`)
    Path(workdir, READY).write_text(f"0x{threading.get_ident():016x}")


_UNIX_SOCKET_PATH = 103  # bytes an AF_UNIX address may have: 107 on Linux, 103 on macOS
_MP_SOCKET_NAME = len("/listener-12345678")  # what multiprocessing adds to its folder for a socket


def _private_mp_temp_dir(workdir: str) -> None:
    """Point multiprocessing's temporary folder (the `pymp-*` one, home of the resource sharer's and the
    forkserver's sockets) at a folder inside `workdir`, which the parent removes whatever happened.

    Every process makes its own `pymp-*` folder on first need and removes it when it exits normally;
    forked children reuse their parent's. A DataLoader worker that sends a tensor starts a resource
    sharer, so it makes one; if it is then terminated (DataLoader's shutdown gives a worker 5 s on a
    busy machine) or killed with the tree, its folder stays in the learner's temporary folder for good.
    Forked descendants of this child now reuse this one instead; spawned ones still make their own."""
    from multiprocessing import process

    folder = os.path.join(workdir, "mp")
    if len(folder) + _MP_SOCKET_NAME > _UNIX_SOCKET_PATH:
        return  # a socket path there would be too long; keep multiprocessing's own behaviour
    os.mkdir(folder, 0o700)
    process.current_process()._config["tempdir"] = folder


def _record_resources(workdir: str) -> None:
    """Log every named semaphore or shared-memory block this process creates.

    multiprocessing unlinks them when their objects are collected, or its resource tracker does when
    the whole program ends. A killed child does neither, and the names would stay in /dev/shm until the
    notebook's kernel exits (forever, if the tracker itself was in the killed tree). The parent reads
    this log after the run and removes what is left.
    """
    from multiprocessing import resource_tracker

    original = resource_tracker.register
    log = os.path.join(workdir, "resources.txt")

    def register(name: str, rtype: str) -> None:
        with open(log, "a") as f:
            f.write(f"{rtype} {name}\n")
        original(name, rtype)

    resource_tracker.register = register


def _release_resources(workdir: Path, shared_tracker: bool) -> None:
    """Unlink what the child tree created and left behind (see `_record_resources`)."""
    log = workdir / "resources.txt"
    if not log.exists():
        return
    from multiprocessing import resource_tracker

    unlink = {}
    with contextlib.suppress(ImportError):
        import _multiprocessing

        unlink["semaphore"] = _multiprocessing.sem_unlink
    with contextlib.suppress(ImportError):
        import _posixshmem

        unlink["shared_memory"] = _posixshmem.shm_unlink
    for line in log.read_text().splitlines():
        rtype, _, name = line.partition(" ")
        if rtype not in unlink:
            continue
        try:
            unlink[rtype](name)
        except OSError:
            continue  # already gone: its owner cleaned up
        if shared_tracker:  # the tracker we share with the child must forget it, or it warns at exit
            resource_tracker.unregister(name, rtype)


_SHM = Path("/dev/shm")
# multiprocessing's named semaphores and SharedMemory blocks, and glibc's temporary sem.XXXXXX, which
# sem_open writes and maps before it links the semaphore to its name and unlinks the temporary one.
_MP_NAMES = ("sem.mp-*", "psm_*", "sem.??????")
_GLIBC_TEMP = re.compile(r"sem\.[A-Za-z0-9]{6}")
_TEMP_AGE = 0.2  # seconds: a live sem_open holds its temporary name for microseconds


def multiprocessing_names() -> set[str]:
    if not _SHM.is_dir():
        return set()
    return {path.name for pattern in _MP_NAMES for path in _SHM.glob(pattern)}


def mapped_inodes() -> set[int]:
    """Inodes of every /dev/shm file some process still maps (a live semaphore or block is mapped)."""
    inodes = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            text = maps.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/"):
                inodes.add(int(fields[4]))
    return inodes


def remove_orphans(before: set[str]) -> None:
    """Unlink multiprocessing names that appeared during the run and that nothing can use any more.

    The log of `_record_resources` misses names that a spawn grandchild created while it was being
    killed (it has a fresh interpreter, without our hook), and a tracker shared with the kernel only
    cleans up when the kernel exits. A name no process maps can never be used again: every live
    semaphore or shared block is mapped by the process holding its object, so this cannot remove
    another program's live object. A glibc temporary name still there after `_TEMP_AGE` seconds belongs
    to a sem_open that was killed halfway.
    """
    new = multiprocessing_names() - before
    if not new:
        return
    temps = {name for name in new if _GLIBC_TEMP.fullmatch(name)}
    if temps:
        youngest = min((_age(_SHM / name) for name in temps), default=_TEMP_AGE)
        time.sleep(max(0.0, _TEMP_AGE - youngest))  # every temporary name at least _TEMP_AGE old
    for name in temps | set(unmapped(new - temps)):
        with contextlib.suppress(OSError):
            (_SHM / name).unlink()


def unmapped(names: set[str]) -> list[str]:
    """The /dev/shm names among `names` that no live process maps: nothing can use them any more (a live
    semaphore or shared block is mapped by the process holding it). A name gone meanwhile is left out."""
    mapped = mapped_inodes()
    found = []
    for name in names:
        with contextlib.suppress(OSError):
            if (_SHM / name).stat().st_ino not in mapped:
                found.append(name)
    return sorted(found)


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return _TEMP_AGE


def _child_main(workdir: str, payload: Any, pickled: bool, timeout: float) -> None:
    _prepare_child(workdir)
    faulthandler.dump_traceback_later(timeout + _SELF_DESTRUCT, exit=True, file=sys.stderr)
    result_path = os.path.join(workdir, "result.pickle")
    try:
        target, args, kwargs = pickle.loads(payload) if pickled else payload
        value = target(*args, **kwargs)
        record = ("returned", value, "")
    except BaseException as exc:  # noqa: BLE001 - every failure is reported to the parent
        import traceback

        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        record = ("raised", None, tb)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        data = pickle.dumps(record)
    except Exception as exc:  # noqa: BLE001
        data = pickle.dumps(("raised", None, f"TypeError: the return value cannot be pickled ({exc})"))
    Path(result_path).write_bytes(data)


def _fork_safe_threads() -> None:
    """Forked from a process that already ran a parallel torch op, a child hangs in OpenMP unless it
    runs torch single-threaded; a target that wants the hang sets its own thread count."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _forked_child_main(workdir: str, payload: Any, pickled: bool, timeout: float) -> None:
    _fork_safe_threads()
    _child_main(workdir, payload, pickled, timeout)


# --------------------------------------------------------------------------------------------------
# The parent side


def _wait_ready(workdir: Path, running: Callable[[], bool]) -> None:
    """Wait until the child has written `READY` (it answers SIGUSR1 with its stack from then on), has
    ended, or `_START_LIMIT` has passed. The target's time starts here, not at the start: on a busy machine
    a child can take over a second to get this far, and a SIGUSR1 sent earlier would kill it with no stack
    (the signal's default action) and call its start-up a hang."""
    marker = workdir / READY
    deadline = time.monotonic() + _START_LIMIT
    while not marker.exists() and running() and time.monotonic() < deadline:
        time.sleep(0.01)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


# Daemons that remove their clients' shared memory once the clients are gone; killing them first
# would leave files in /dev/shm: torch_shm_manager (torch_* files; Linux cuts process names to 15
# characters) and multiprocessing's resource tracker (sem.mp-* and psm_* names; its process is a plain
# python, known by its command line). The tracker unlinks whatever its clients registered and never
# released once the last client is gone, including names a spawn grandchild registered while it was
# being killed, which no log of ours can see.
_CLEANER_NAMES = ("torch_shm_manag",)
_CLEANER_COMMANDS = ("multiprocessing.resource_tracker",)
_GROUP_GRACE = 2.0  # seconds the rest of a finished child's process group gets to end by itself


def _kill_tree(pid: int) -> int:
    """Kill child `pid` and everything below it, then end its process group; return how many were alive.

    The child itself is left for its owner (multiprocessing or subprocess) to reap: psutil reaping it
    would leave that owner believing it still runs.
    """
    below = [p for p in _descendants(pid) if is_alive(p)]
    workers = [p for p in below if not is_cleaner(p)]
    for proc in workers:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_gone(workers, timeout=3.0)
    _end_group(pid, {pid, *(p.pid for p in below)})
    return len(below) + 1


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return ""


def is_cleaner(proc: psutil.Process) -> bool:
    if _name(proc).startswith(_CLEANER_NAMES):
        return True
    try:
        command = " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(marker in command for marker in _CLEANER_COMMANDS)


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and is_alive(proc):
                members.append(proc)
        except (OSError, psutil.Error):
            continue
    return members


def _end_group(pgid: int, pids: set[int]) -> None:
    """After the child has ended: give the rest of its process group a moment to end by itself, kill
    the workers still left, give the cleaners (see `_CLEANER_NAMES`) a moment to see their last client
    go and remove its files, kill what is left, and remove shared memory files named after processes
    of the tree (torch_<pid>_...)."""
    if pgid == os.getpgid(0):
        return
    members = _await_group(pgid, _GROUP_GRACE)
    for _ in range(3):  # a worker may start another between the listing and the kill
        pids |= {m.pid for m in members}
        workers = [m for m in members if not is_cleaner(m)]
        if not workers:
            break
        for proc in workers:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        wait_gone(workers, timeout=3.0)
        members = _group_members(pgid)
    members = _await_group(pgid, _GROUP_GRACE)
    pids |= {m.pid for m in members}
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    wait_gone(members, timeout=3.0)
    # A member that joined the group after the listing above still maps its semaphores until it has
    # died: wait for the whole group, so that the orphan sweep that follows sees them unmapped.
    _await_group(pgid, 3.0)
    if _SHM.is_dir():
        for pid in pids:
            for leftover in _SHM.glob(f"torch_{pid}_*"):
                with contextlib.suppress(OSError):
                    leftover.unlink()


def _await_group(pgid: int, timeout: float) -> list[psutil.Process]:
    """Wait up to `timeout` seconds for the group to empty; return the members still alive."""
    deadline = time.monotonic() + timeout
    members = _group_members(pgid)
    while members and time.monotonic() < deadline:
        time.sleep(0.05)
        members = _group_members(pgid)
    return members


def wait_gone(procs: list[psutil.Process], timeout: float) -> None:
    """Wait until each process has exited. A zombie counts as gone: its parent, killed too, can no
    longer reap it, and whoever adopts it (init or a subreaper) will."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(is_alive(p) for p in procs):
        time.sleep(0.02)


def is_alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _dump_stack(pid: int, trace_path: Path) -> None:
    """Ask the child for its stack and wait until faulthandler has written it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + _DUMP_GRACE
    size = -1
    while time.monotonic() < deadline:
        time.sleep(0.05)
        new = trace_path.stat().st_size if trace_path.exists() else 0
        if new and new == size:
            return
        size = new


FAULTHANDLER_BLOCK = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
FAULTHANDLER_FRAME = re.compile(r'^\s+File "(.+)", line (\d+) in (.+)$')


def _parse_stack(trace: str, main_ident: str) -> list[tuple[str, int, str]]:
    """Frames (file, line, name) of the main thread in faulthandler's last dump, outermost first."""
    blocks: list[tuple[str, list[tuple[str, int, str]]]] = []
    for line in trace.splitlines():
        head = FAULTHANDLER_BLOCK.match(line)
        if head or line.startswith("Stack (most recent call first)"):
            blocks.append((head.group(1).lower() if head else "", []))
            continue
        frame = FAULTHANDLER_FRAME.match(line)
        if frame and blocks:
            blocks[-1][1].append((frame.group(1), int(frame.group(2)), frame.group(3)))
    for ident, frames in reversed(blocks):
        if ident in ("", main_ident.lower()):
            return list(reversed(frames))
    return list(reversed(blocks[-1][1])) if blocks else []


def enclosing_qualname(filename: str, lineno: int, name: str) -> str:
    """`Queue.get` rather than `get`: the innermost def or class around the line, from the source."""
    source = "".join(linecache.getlines(filename))
    if not source:
        return name
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return name
    best: list[str] = []

    def visit(node: ast.AST, path: list[str]) -> None:
        nonlocal best
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                end = getattr(child, "end_lineno", child.lineno)
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                if first <= lineno <= end:
                    best = path + [child.name]
                    visit(child, best)
                    return
            visit(child, path) if not isinstance(child, ast.expr) else None

    visit(tree, [])
    if not best or best[-1] != name:
        return name
    return ".".join(best)


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib")})


def _describe(frames: list[tuple[str, int, str]], start_name: str | None, start_file: str | None):
    """Full stack from the target inward, and the short form: the target's own frames plus the first
    library call they made (where the wait really is, e.g. `Queue.get`)."""
    start = 0
    for i, (filename, _, name) in enumerate(frames):
        same_file = start_file is None or os.path.realpath(filename) == os.path.realpath(start_file)
        if (start_name is None or name == start_name) and same_file:
            start = i
            break
    frames = frames[start:]
    names = [enclosing_qualname(f, n, name) for f, n, name in frames]
    libs = _library_dirs()
    short: list[str] = []
    for (filename, _, _), qual in zip(frames, names, strict=True):
        short.append(qual)
        if os.path.realpath(filename).startswith(libs):
            break
    return names, list(reversed(short))


def _finish(
    status: str,
    timeout: float,
    started: float,
    workdir: Path,
    start_name: str | None,
    start_file: str | None,
    expect: str | None,
    *,
    value: Any = None,
    error_text: str = "",
    signal_name: str = "",
    killed: int = 0,
) -> Outcome:
    trace = (workdir / "trace.txt").read_text(errors="replace") if (workdir / "trace.txt").exists() else ""
    ident_file = workdir / READY
    ident = ident_file.read_text() if ident_file.exists() else ""
    stack: list[str] = []
    short: list[str] = []
    if status in ("hung", "died") and trace:
        stack, short = _describe(_parse_stack(trace, ident), start_name, start_file)
    elif status == "raised" and error_text:
        stack, short = _describe(_parse_traceback(error_text), start_name, start_file)
        short = short[:1] if short else []
    output = (workdir / "output.txt").read_text(errors="replace") if (workdir / "output.txt").exists() else ""
    return Outcome(
        status=status,
        timeout=timeout,
        seconds=time.monotonic() - started,
        value=value,
        error=error_line(error_text) if error_text else "",
        signal=signal_name,
        stack=stack,
        stuck_in=short,
        stderr=clean(output),
        killed=killed,
        expect=expect,
    )


_TB_FRAME = re.compile(r'^\s+File "(.+)", line (\d+), in (.+)$')


def _output_error(workdir: Path, fallback: str) -> str:
    """What the child wrote, if it holds an error line; else `fallback` (it died without saying why)."""
    path = workdir / "output.txt"
    output = path.read_text(errors="replace") if path.exists() else ""
    return output if error_line(output) else fallback


def _parse_traceback(text: str) -> list[tuple[str, int, str]]:
    frames = []
    for line in text.splitlines():
        match = _TB_FRAME.match(line)
        if match:
            frames.append((match.group(1), int(match.group(2)), match.group(3)))
    return frames  # a traceback lists the outermost frame first already


def run(
    target: Callable[..., Any],
    *args: Any,
    timeout: float = 3.0,
    start_method: str | None = None,
    expect: str | None = None,
    **kwargs: Any,
) -> Outcome:
    """Call `target(*args, **kwargs)` in a child process and give it `timeout` seconds, counted from when
    the child is ready to show its stack (its own start-up, at most 60 s, does not count; see `_wait_ready`).

    `start_method` pins the child's start method ("fork", "spawn", "forkserver"); None uses the
    platform default. Under spawn and forkserver the target must be importable (defined in a module,
    not in the notebook): otherwise the outcome is the real `AttributeError` the child raises when it
    unpickles it. A forked child runs torch single-threaded unless the target changes it, because a
    fork of a kernel that already ran a parallel op hangs in OpenMP otherwise. `expect` ("return",
    "raise", "hang", "die") only changes the wording of the summary.
    """
    if not callable(target):
        raise TypeError(f"target must be callable, got {type(target).__name__}")
    timeout = _check_common(timeout, expect)
    methods = mp.get_all_start_methods()
    if start_method is not None and start_method not in methods:
        raise ValueError(f"start_method must be one of {methods} on this platform, got {start_method!r}")
    ctx = mp.get_context(start_method or default_start_method())
    forked = ctx.get_start_method() == "fork"
    if forked:
        payload: Any = (target, args, kwargs)  # fork copies the objects; even lambdas work
    else:
        payload = pickle.dumps((target, args, kwargs))  # pickles by reference, like multiprocessing
    from multiprocessing import resource_tracker

    # Start this process's resource tracker now, so the child shares it instead of starting its own
    # inside the process group that a time-out kills.
    resource_tracker.ensure_running()
    before = multiprocessing_names()
    with tempfile.TemporaryDirectory(prefix="watchdog-") as tmp:
        workdir = Path(tmp)
        try:
            return _run_child(ctx, forked, target, payload, timeout, expect, workdir)
        finally:
            _release_resources(workdir, shared_tracker=True)
            remove_orphans(before)


def _run_child(
    ctx: Any, forked: bool, target: Any, payload: Any, timeout: float, expect: str | None, workdir: Path
) -> Outcome:
    tmp = str(workdir)
    entry = _forked_child_main if forked else _child_main
    proc = ctx.Process(target=entry, args=(tmp, payload, not forked, timeout), daemon=False)
    started = time.monotonic()
    proc.start()
    _wait_ready(workdir, proc.is_alive)
    proc.join(timeout)
    name = getattr(target, "__name__", None)
    code = getattr(target, "__code__", None)
    finish = functools.partial(
        _finish,
        timeout=timeout,
        started=started,
        workdir=workdir,
        start_name=name,
        start_file=code.co_filename if code is not None else None,
        expect=expect,
    )
    if proc.is_alive():
        _dump_stack(proc.pid, workdir / "trace.txt")
        killed = _kill_tree(proc.pid)
        proc.join(3)
        proc.close()
        return finish("hung", killed=killed)
    exitcode, pid = proc.exitcode, proc.pid
    proc.close()
    _end_group(pid, {pid})  # anything the target left running in its group
    result_path = workdir / "result.pickle"
    if exitcode is not None and exitcode < 0:
        return finish("died", signal_name=signal.Signals(-exitcode).name)
    if not result_path.exists():
        return finish(
            "raised", error_text=_output_error(workdir, f"ChildProcessError: child exited with code {exitcode}")
        )
    status, value, tb = pickle.loads(result_path.read_bytes())
    return finish(status, value=value, error_text=tb)


def run_script(
    script: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    timeout: float = 5.0,
    expect: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Run a Python file as `__main__` (as `python script.py` would) with the same guarantees as `run`.

    The file runs under this interpreter through `runpy`, so that SIGUSR1 can dump its stack; spawn
    children of the script still re-import it by path, exactly as for a plain `python script.py`.
    The outcome's value is the exit code; a non-zero exit is "raised" with the error line of its output.
    """
    if not isinstance(script, (str, os.PathLike)):
        raise TypeError(f"script must be a path, got {type(script).__name__}")
    path = Path(script)
    if not path.is_file():
        raise ValueError(f"script must be an existing file, got {str(script)!r}")
    if isinstance(args, str) or not all(isinstance(a, str) for a in args):
        raise TypeError("args must be a sequence of strings")
    timeout = _check_common(timeout, expect)
    path = path.resolve()
    with tempfile.TemporaryDirectory(prefix="watchdog-") as tmp:
        workdir = Path(tmp)
        boot = (
            "import runpy, sys; from helpers.watchdog import _prepare_child; "
            f"_prepare_child({tmp!r}); sys.argv = sys.argv[1:]; "
            "sys.path[0] = __import__('os').path.dirname(sys.argv[0]); "
            "runpy.run_path(sys.argv[0], run_name='__main__')"
        )
        before = multiprocessing_names()
        started = time.monotonic()
        try:
            return _run_script_child(boot, path, args, timeout, expect, cwd, env, workdir, started)
        finally:
            _release_resources(workdir, shared_tracker=False)
            remove_orphans(before)


def _run_script_child(
    boot: str,
    path: Path,
    args: Sequence[str],
    timeout: float,
    expect: str | None,
    cwd: Any,
    env: Any,
    workdir: Path,
    started: float,
) -> Outcome:
    # The script's temporary folder lives in the watchdog's own, removed afterwards: a killed script
    # never reaches the exit handler that removes its pymp-* folder (forkserver's socket, for one).
    private_tmp = workdir / "tmp"
    private_tmp.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", boot, str(path), *args],
        cwd=cwd,
        env={**(os.environ if env is None else env), "TMPDIR": str(private_tmp)},
        stdin=subprocess.DEVNULL,
    )
    finish = functools.partial(
        _finish,
        timeout=timeout,
        started=started,
        workdir=workdir,
        start_name="<module>",
        start_file=str(path),
        expect=expect,
    )
    _wait_ready(workdir, lambda: proc.poll() is None)
    try:
        exitcode = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _dump_stack(proc.pid, workdir / "trace.txt")
        killed = _kill_tree(proc.pid)
        proc.wait(3)
        return finish("hung", killed=killed)
    _end_group(proc.pid, {proc.pid})  # anything the script left running
    if exitcode < 0:
        return finish("died", signal_name=signal.Signals(-exitcode).name)
    if exitcode != 0:
        outcome = finish("raised", error_text=_output_error(workdir, f"SystemExit: {exitcode}"))
        outcome.value = exitcode
        return outcome
    return finish("returned", value=0)
