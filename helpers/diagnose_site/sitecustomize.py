"""Armed by `python -m helpers.diagnose` in every Python process of the command it runs.

`helpers.diagnose` puts this folder first on the command's PYTHONPATH and names a folder of its own in
HELPERS_DIAGNOSE_DIR, so every Python process of the tree (the script, spawn and forkserver children,
torchrun's workers; fork children re-arm through `os.register_at_fork`) gets one file there,
`stack-<pid>.txt`, to which faulthandler writes every thread's stack when diagnose sends SIGUSR2 (the
fallback when py-spy cannot attach) or when the process dies of a fatal signal (SIGSEGV, SIGBUS, ...).
It prints nothing, then runs the sitecustomize it hides (the next one on sys.path), if any.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys

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
    trace.write(f"# pid {os.getpid()} ppid {os.getppid()}\n")
    trace.flush()
    faulthandler.enable(file=trace, all_threads=True)
    faulthandler.register(signal.SIGUSR2, file=trace, all_threads=True, chain=False)
    old = _state.get("file")
    _state["file"] = trace
    if old is not None:
        old.close()


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
    os.register_at_fork(after_in_child=_start)
_run_hidden_sitecustomize()
