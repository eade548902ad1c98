"""Armed by `python -m helpers.diagnose` in every Python process of the command it runs.

`helpers.diagnose` puts this folder first on the command's PYTHONPATH and names a folder of its own in
HELPERS_DIAGNOSE_DIR, so every Python process of the tree (the script, spawn and forkserver children,
torchrun's workers; fork children re-arm through `os.register_at_fork`) gets one file there,
`stack-<pid>.txt`, to which faulthandler writes every thread's stack when diagnose sends SIGUSR2 (the
fallback when py-spy cannot attach) or when the process dies of a fatal signal (SIGSEGV, SIGBUS, ...).
It also leaves two facts a stack cannot show: in a forked child's file, how many threads its parent had
at the fork (a lock "held at fork" needs another thread to have held it), and, for each child process this
process reaps (`os.waitpid`, which multiprocessing, DataLoader and torch's spawn call), a file
`ended-<pid>.txt` with how that child ended (a pool worker's exit code, a worker's SIGKILL), which its
parent may never print.
It prints nothing, then runs the sitecustomize it hides (the next one on sys.path), if any.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import time

_DIR = os.environ.get("HELPERS_DIAGNOSE_DIR", "")
_HERE = os.path.dirname(os.path.abspath(__file__))
_PR_SET_PTRACER = 0x59616D61  # Yama: let this tracer (and its descendants) attach
_state: dict = {}


def _arm() -> None:
    """Open this process's own file and point faulthandler at it (again after a fork: the child must
    not write into its parent's file)."""
    path = os.path.join(_DIR, f"stack-{os.getpid()}.txt")
    try:
        trace = open(path, "w")  # noqa: SIM115 - faulthandler writes to it until the process ends
    except OSError:
        return
    at_fork = _state.pop("threads_at_fork", None)
    forked = f" forked with {at_fork[0]} thread(s) ({at_fork[1]} Python)" if at_fork else ""
    trace.write(f"# pid {os.getpid()} ppid {os.getppid()}{forked}\n")
    trace.flush()
    faulthandler.enable(file=trace, all_threads=True)
    faulthandler.register(signal.SIGUSR2, file=trace, all_threads=True, chain=False)
    old = _state.get("file")
    _state["file"] = trace
    if old is not None:
        old.close()


def _before_fork() -> None:
    """The parent's threads at the fork (what the child inherits, in memory, with this value)."""
    threading = sys.modules.get("threading")
    python = threading.active_count() if threading is not None else 1
    try:
        with open("/proc/self/status") as f:
            native = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    except (OSError, StopIteration, ValueError):
        native = python
    _state["threads_at_fork"] = (native, python)


def _after_fork_in_parent() -> None:
    _state.pop("threads_at_fork", None)


def _record_exits() -> None:
    """Wrap os.waitpid: note how each reaped child ended, in a file of its own (the wrapper returns
    exactly what os.waitpid returns)."""
    real = os.waitpid

    def waitpid(pid: int, options: int, /) -> tuple[int, int]:
        got, status = real(pid, options)
        if got > 0:
            try:
                code = os.waitstatus_to_exitcode(status)
                with open(os.path.join(_DIR, f"ended-{got}.txt"), "w") as f:
                    f.write(f"{os.getpid()} {code} {time.time():.3f}\n")
            except (OSError, ValueError):
                pass
        return got, status

    waitpid.__doc__ = real.__doc__
    os.waitpid = waitpid


def _allow_tracer() -> None:
    """Under Yama's ptrace_scope 1 only ancestors may attach; diagnose is one, its py-spy is not."""
    tracer = os.environ.get("HELPERS_DIAGNOSE_PID", "")
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            if f.read().strip() != "1" or not tracer.isdigit():
                return
    except OSError:
        return
    import ctypes

    ctypes.CDLL(None).prctl(_PR_SET_PTRACER, int(tracer), 0, 0, 0)


def _run_hidden_sitecustomize() -> None:
    """Run the sitecustomize this file shadows, as Python would have without it."""
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _start() -> None:
    _arm()
    _allow_tracer()  # Yama forgets a process's tracer at fork: ask again in every child


if _DIR and os.path.isdir(_DIR):
    _start()
    _record_exits()
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_start)
_run_hidden_sitecustomize()
