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
In a process that makes a torch.distributed process group it also keeps that rank's Flight Recorder for
diagnose (only when diagnose made the FIFO `fr-trigger` in its folder). An import hook wraps
`distributed_c10d._new_process_group_helper`, which init_process_group and new_group call; after the
first group it writes `fr-ready-<pid>.txt` and starts a daemon thread that blocks opening the FIFO (at no
cost) until a writer opens it: diagnose at the deadline or when a rank has ended, or another rank on its
way out. The thread then writes the rank's records (torch's `_dump_fr_trace`, without stack traces) to
`fr-<pid>-rank<r>.pkl`; the rank writes the same file when it exits through Python, then wakes the others
(torch's spawn ends them as soon as one rank fails; diagnose would be a poll later). A rank blocked in a
collective runs no Python signal handler, hence a thread and not a signal.
An uncaught exception's traceback is written in one piece, so that two children failing at once do not
interleave their lines on the stderr they share.
It prints nothing else, then runs the sitecustomize it hides (the next one on sys.path), if any.
"""

from __future__ import annotations

import contextlib
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


def _whole_tracebacks() -> None:
    """Write an uncaught exception's traceback to stderr in one `os.write`, not line by line: two children
    that fail at once (spawn children re-importing a script) share one stderr pipe, and their lines
    interleaved so that diagnose could not tell whose traceback was whose. A pipe keeps a write of up to
    PIPE_BUF (4 KiB on Linux) whole. The text is exactly what Python's own hook prints."""
    real = sys.excepthook
    if real is not sys.__excepthook__:
        return  # someone else's hook: theirs prints

    def excepthook(kind, value, tb) -> None:
        try:
            import traceback

            stream = sys.stderr
            text = "".join(traceback.format_exception(kind, value, tb))
            data = text.encode(stream.encoding or "utf-8", stream.errors or "backslashreplace")
            stream.flush()
            fd = stream.fileno()
        except Exception:  # noqa: BLE001 - no usable stderr: Python's hook does what it can
            real(kind, value, tb)
            return
        while data:
            try:
                data = data[os.write(fd, data) :]
            except InterruptedError:
                continue
            except OSError:
                return

    sys.excepthook = excepthook


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


def _fr_rank() -> int | None:
    """This process's global rank, while the default group exists (else the first group's rank)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001 - a group being torn down
        pass
    return _state.get("fr_rank")


def _fr_dump() -> None:
    """Write this rank's Flight Recorder records (no stack traces: symbolising them takes seconds) to
    `fr-<pid>-rank<r>.pkl`, through a temporary name so that diagnose never reads half a file; a failure
    goes to `fr-<pid>.err` instead."""
    lock = _state.get("fr_lock")
    if lock is None or _state.get("fr_pid") != os.getpid() or not os.path.isdir(_DIR):
        return  # no group made here (a forked child holds its parent's state, not its own group)
    with lock:
        rank = _fr_rank()
        try:
            c10d = sys.modules["torch._C._distributed_c10d"]
            data = c10d._dump_fr_trace(includeStackTraces=False)
            name, mode = f"fr-{os.getpid()}-rank{rank if rank is not None else 'unknown'}.pkl", "wb"
        except Exception as exc:  # noqa: BLE001 - said in diagnose's report, never raised here
            data, name, mode = f"{type(exc).__name__}: {exc}", f"fr-{os.getpid()}.err", "w"
        path = os.path.join(_DIR, name)
        try:
            with open(path + ".part", mode) as f:
                f.write(data)
            os.replace(path + ".part", path)
        except OSError:
            pass


def _fr_trigger() -> None:
    """Wake the other ranks' listeners (what diagnose does at the deadline); nobody waiting is fine."""
    try:
        fd = os.open(os.path.join(_DIR, "fr-trigger"), os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    os.close(fd)


def _fr_at_exit() -> None:
    """On the way out (atexit and multiprocessing's exit hooks both call this; once): dump this rank's
    records, then wake the other ranks so that theirs are written too before a launcher ends them (a
    rank that failed is seen by torch's spawn at once; diagnose would see it a poll later)."""
    if _state.get("fr_exited") == os.getpid() or _state.get("fr_pid") != os.getpid():
        return  # done already, or a forked child of a rank (it made no group of its own)
    _state["fr_exited"] = os.getpid()  # from here on this process's own listener stays quiet
    _fr_dump()
    _fr_trigger()


def _fr_listen() -> None:
    """Block until a writer opens the FIFO (diagnose, or a rank on its way out), then dump; again, a
    bounded number of times."""
    path = os.path.join(_DIR, "fr-trigger")
    for _ in range(50):
        try:
            with open(path, "rb") as fifo:
                fifo.read()
        except OSError:
            return
        if _state.get("fr_exited") == os.getpid():
            return
        _fr_dump()


def _fr_group_made(group_rank: object) -> None:
    """Called after each process group is made: the first time, note the rank and start the listener."""
    if _state.get("fr_pid") == os.getpid():
        return
    import threading

    _state["fr_pid"] = os.getpid()
    _state["fr_rank"] = group_rank if isinstance(group_rank, int) else None
    _state["fr_lock"] = threading.Lock()
    threading.Thread(target=_fr_listen, name="diagnose-flight-recorder", daemon=True).start()
    import atexit

    atexit.register(_fr_at_exit)
    try:
        from multiprocessing import util  # a fork child exits by os._exit: atexit does not run, these do

        util.Finalize(None, _fr_at_exit, exitpriority=100)
    except Exception:  # noqa: BLE001
        pass
    try:
        with open(os.path.join(_DIR, f"fr-ready-{os.getpid()}.txt"), "w") as f:
            f.write(f"{os.getpid()} {_state['fr_rank']}\n")
    except OSError:
        pass


def _patch_c10d(module: object) -> None:
    """Wrap `_new_process_group_helper`, which init_process_group and new_group call by its global name."""
    real = getattr(module, "_new_process_group_helper", None)
    if real is None or getattr(real, "_diagnose", False):
        return
    import functools

    @functools.wraps(real)
    def helper(*args, **kwargs):
        made = real(*args, **kwargs)
        with contextlib.suppress(Exception):  # the user's group matters, our listener does not
            _fr_group_made(kwargs.get("group_rank", args[1] if len(args) > 1 else None))
        return made

    helper._diagnose = True
    module._new_process_group_helper = helper


class _C10dLoader:
    """The real loader of torch.distributed.distributed_c10d, patching the module once it has run."""

    def __init__(self, real: object) -> None:
        self._real = real

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)

    def create_module(self, spec: object) -> object:
        return self._real.create_module(spec)

    def exec_module(self, module: object) -> None:
        self._real.exec_module(module)
        with contextlib.suppress(Exception):
            _patch_c10d(module)


class _C10dFinder:
    """Finds nothing itself: for torch.distributed.distributed_c10d it returns the path finder's spec
    with the loader wrapped."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> object:
        if name != "torch.distributed.distributed_c10d":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _C10dLoader(spec.loader)
        return spec


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
    _whole_tracebacks()
    if os.path.exists(os.path.join(_DIR, "fr-trigger")):
        sys.meta_path.insert(0, _C10dFinder())
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_start)
_run_hidden_sitecustomize()
