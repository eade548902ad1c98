"""Run the command in a process group of its own, watch its process tree, and end all of it.

We become a *child subreaper* (Linux `prctl(PR_SET_CHILD_SUBREAPER)`): a process whose parent dies is
re-parented to us instead of to init, so every process the command ever starts stays below us, even
torchrun's workers (which it starts in sessions of their own) and `torch_shm_manager` (which calls
`setsid`). A process group alone is not the whole tree.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from helpers.watchdog import is_alive, is_cleaner, multiprocessing_names, remove_orphans, wait_gone

_PR_SET_CHILD_SUBREAPER = 36
_POLL = 0.1  # seconds between looks at the tree (new and vanished pids: the churn of dying workers)
_KEEP = 2_000_000  # characters of stderr kept for the diagnosis (the newest)
_CLEANER_GRACE = 3.0  # seconds the resource tracker gets to unlink its clients' semaphores and exit
_SHM = Path("/dev/shm")


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux only); False where the platform cannot."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


@dataclass
class Seen:
    """A process of the tree as first seen, and when it vanished (None while it lives)."""

    pid: int
    ppid: int
    cmdline: list[str]
    first: float
    gone: float | None = None


@dataclass
class Tree:
    """The running command: its main process, what it wrote on stderr, and every pid seen below us."""

    proc: subprocess.Popen
    started: float
    stderr: list[str] = field(default_factory=list)
    stderr_size: int = 0
    seen: dict[int, Seen] = field(default_factory=dict)
    reader: threading.Thread | None = None
    helpers: set[int] = field(default_factory=set)  # our own py-spy processes: not the command's

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_text(self) -> str:
        return "".join(self.stderr)

    def processes(self) -> list[psutil.Process]:
        """Every live descendant of ours that belongs to the command (zombies included)."""
        try:
            below = psutil.Process().children(recursive=True)
        except psutil.Error:
            return []
        return [p for p in below if p.pid not in self.helpers]

    def look(self) -> None:
        """Record new pids and the ones that vanished since the last look."""
        now = time.monotonic()
        alive = set()
        for proc in self.processes():
            alive.add(proc.pid)
            if proc.pid not in self.seen:
                with contextlib.suppress(psutil.Error):
                    self.seen[proc.pid] = Seen(proc.pid, proc.ppid(), proc.cmdline(), now)
        for entry in self.seen.values():
            if entry.gone is None and entry.pid not in alive:
                entry.gone = now


def _tee(fd: int, tree: Tree) -> None:
    """Copy the command's stderr to ours byte for byte, keeping the newest text for the diagnosis."""
    out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        if out is not None:
            with contextlib.suppress(OSError, ValueError):
                out.write(data)
                out.flush()
        tree.stderr.append(data.decode("utf-8", errors="replace"))
        tree.stderr_size += len(data)
        while sum(len(s) for s in tree.stderr) > _KEEP and len(tree.stderr) > 1:
            tree.stderr.pop(0)
    os.close(fd)


def start(command: list[str], env: dict[str, str]) -> Tree:
    """Start `command` leading a new process group; stdout and stdin are its own, stderr is teed.

    stdin stays a terminal's only when it is not one: a process group that is not the terminal's
    foreground group is stopped (SIGTTIN) when it reads the terminal, and Ctrl-C must reach us, not it.
    """
    read_end, write_end = os.pipe()
    stdin = subprocess.DEVNULL if sys.stdin is None or os.isatty(0) else None
    try:
        proc = subprocess.Popen(command, env=env, stdin=stdin, stderr=write_end, preexec_fn=os.setpgrp)  # noqa: PLW1509
    finally:
        os.close(write_end)
    tree = Tree(proc=proc, started=time.monotonic())
    tree.reader = threading.Thread(target=_tee, args=(read_end, tree), daemon=True, name="diagnose-stderr")
    tree.reader.start()
    tree.look()
    return tree


def wait(tree: Tree, deadline: float, stop: threading.Event) -> int | None:
    """The command's exit code if it ends before `deadline` (monotonic) or `stop`; None otherwise."""
    while True:
        tree.look()
        code = tree.proc.poll()
        if code is not None:
            return code
        if stop.is_set() or time.monotonic() >= deadline:
            return None
        stop.wait(min(_POLL, max(0.0, deadline - time.monotonic())))


def _reap(main: int) -> None:
    """Collect the exit status of adopted orphans that ended (never the main process: Popen owns it)."""
    me = os.getpid()
    for proc in psutil.Process().children():
        if proc.pid == main:
            continue
        with contextlib.suppress(psutil.Error, ChildProcessError, OSError):
            if proc.ppid() == me and proc.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(proc.pid, os.WNOHANG)


def _live(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if is_alive(p)]


def end(tree: Tree, shm_before: set[str]) -> int:
    """Kill every process of the command; return how many were alive.

    Workers first: stopped (SIGSTOP, so that a pool cannot start replacements while we kill), then
    killed, in up to three rounds for processes started in between. The cleaners last: the resource
    tracker unlinks the semaphores and shared memory its dead clients registered once the last of
    them is gone, and torch_shm_manager its segments; killed at once with the rest, they left
    `sem.mp-*` files behind. What they still leave (a tracker that was itself killed by the
    command) is removed as the watchdog does: names that appeared during the run and nobody maps.
    """
    killed: set[int] = set()
    for _ in range(3):
        workers = [p for p in _live(tree.processes()) if not is_cleaner(p)]
        if not workers:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for proc in workers:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(sig)
        killed |= {p.pid for p in workers}
        wait_gone(workers, timeout=3.0)
        _reap(tree.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(tree.pid, signal.SIGKILL)
    cleaners = _live(tree.processes())
    killed |= {p.pid for p in cleaners}
    deadline = time.monotonic() + _CLEANER_GRACE
    while _live(cleaners) and time.monotonic() < deadline:
        time.sleep(0.05)
        _reap(tree.pid)
    for proc in _live(cleaners):
        with contextlib.suppress(psutil.Error):
            proc.kill()
    wait_gone(cleaners, timeout=3.0)
    with contextlib.suppress(subprocess.TimeoutExpired):
        tree.proc.wait(3)
    _reap(tree.pid)
    tree.look()
    _remove_leftovers(tree, shm_before)
    return len(killed)


def settle(tree: Tree, shm_before: set[str], grace: float = 2.0) -> list[Seen]:
    """After the main process exited: give the rest of the tree `grace` seconds to end by itself
    (the resource tracker ends when its last client does), then end what is left; return it."""
    deadline = time.monotonic() + grace
    while _live(tree.processes()) and time.monotonic() < deadline:
        _reap(tree.pid)
        time.sleep(0.05)
    _reap(tree.pid)
    left = [tree.seen[p.pid] for p in _live(tree.processes()) if p.pid in tree.seen]
    if left:
        end(tree, shm_before)
    else:
        tree.look()
        _remove_leftovers(tree, shm_before)
    return left


def _remove_leftovers(tree: Tree, shm_before: set[str]) -> None:
    """/dev/shm names the tree left: torch's `torch_<pid>_*` of its pids, and unmapped multiprocessing
    names that appeared during the run (helpers.watchdog's rule: nobody can use them any more)."""
    if _SHM.is_dir():
        for pid in tree.seen:
            for leftover in _SHM.glob(f"torch_{pid}_*"):
                with contextlib.suppress(OSError):
                    leftover.unlink()
    remove_orphans(shm_before)
    if tree.reader is not None:
        tree.reader.join(5.0)  # the rest of stderr (a loaded machine is slow to hand it over): the diagnosis reads it


def listening(tree: Tree) -> dict[int, dict[int, str]]:
    """The TCP ports the command's live processes listen on: port -> {pid: command line}."""
    found: dict[int, dict[int, str]] = {}
    for proc in _live(tree.processes()):
        with contextlib.suppress(psutil.Error, OSError):
            for conn in proc.net_connections("tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr:
                    found.setdefault(conn.laddr.port, {})[proc.pid] = " ".join(proc.cmdline())
    return found


def still_running(tree: Tree) -> list[psutil.Process]:
    """Processes of the command still alive (a zombie is not: whoever adopted it reaps it)."""
    return _live(tree.processes())


def shm_names() -> set[str]:
    """The multiprocessing names in /dev/shm now (to know which ones the run added)."""
    return multiprocessing_names()
