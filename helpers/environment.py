"""What this machine offers to parallel code: cores, start methods, shared memory, torch's threads.

Every chapter sizes its experiments from these numbers (workers = usable cores, shared payloads a
fraction of free /dev/shm), and the notebooks print them in ignored cells, since they differ per machine.
torch is imported only inside `report()`, so that importing this module stays cheap in a spawned child.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import shutil
import sys
from typing import Any

__all__ = [
    "usable_cores",
    "shm_bytes",
    "default_start_method",
    "default_context",
    "remove_mp_temp_dir",
    "report",
    "format_report",
]


def usable_cores() -> int:
    """Cores this process may run on: the affinity mask where the OS has one (Linux), else the count.

    `os.cpu_count()` reports the machine; containers and `taskset` often allow fewer, and sizing a pool
    from the machine's count oversubscribes the cores you actually have.
    """
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def shm_bytes() -> tuple[int, int] | None:
    """(total, free) bytes of /dev/shm, where shared tensors live on Linux; None where there is none."""
    if not os.path.isdir("/dev/shm"):
        return None
    usage = shutil.disk_usage("/dev/shm")
    return usage.total, usage.free


def default_start_method() -> str:
    """The start method a plain `multiprocessing.Process` would use here, read without fixing it.

    `mp.get_context()` and `mp.get_start_method()` with no argument *set* the default context as a side
    effect, after which the learner's own `set_start_method(...)` raises "context has already been set"
    (notebook 06 teaches that pitfall, so the course must not cause it). `allow_none=True` only reads;
    when nothing is set yet, the platform default is the default context's fallback (fork on Linux up to
    Python 3.13, forkserver from 3.14, spawn on macOS and Windows).
    """
    chosen = mp.get_start_method(allow_none=True)
    if chosen is not None:
        return chosen
    fallback = getattr(getattr(mp.context, "_default_context", None), "_default_context", None)
    return fallback.get_start_method() if fallback is not None else mp.get_all_start_methods()[0]


def default_context() -> mp.context.BaseContext:
    """The context of the default start method, for helpers that start processes, without fixing it."""
    return mp.get_context(default_start_method())


def remove_mp_temp_dir() -> bool:
    """Remove the `pymp-*` folder multiprocessing made for this process in the temporary folder, now;
    return whether this process is left without one (always, unless removing it failed).

    multiprocessing makes it on first need (the forkserver's socket, the resource sharer's socket from
    which receivers fetch the descriptors of tensors sent under `file_descriptor`, a listener's address)
    and removes it only at a normal interpreter exit; a killed kernel (nbval kills its kernels, and so
    does a crash) leaves it behind. The forkserver and the resource sharer are stopped first; both come
    back on next use. Call it when no tensor sent is still waiting to be received.
    """
    from multiprocessing import forkserver, resource_sharer, util

    folder = mp.current_process()._config.get("tempdir")  # multiprocessing keeps the folder's name here
    if not folder:
        return True
    if getattr(forkserver, "_forkserver", None) is not None:
        forkserver._forkserver._stop()  # its socket is in the folder
    resource_sharer.stop(timeout=5)
    for finalizer in list(util._finalizer_registry.values()):  # CPython's own "remove the folder at exit"
        if getattr(finalizer, "_callback", None) is util._remove_temp_dir:
            finalizer()  # runs once, unregisters itself and forgets the folder, as at exit
    return not os.path.exists(folder)


def report() -> dict[str, Any]:
    """The facts later notebooks refer to, as a dictionary."""
    import torch

    shm = shm_bytes()
    return {
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__,
        "cores (machine)": os.cpu_count(),
        "cores (usable)": usable_cores(),
        "start methods": ", ".join(mp.get_all_start_methods()),
        "default start method": default_start_method(),
        "torch intra-op threads": torch.get_num_threads(),
        "torch inter-op threads": torch.get_num_interop_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "(not set)"),
        "parallel backend": _parallel_backend(torch),
        "sharing strategy": torch.multiprocessing.get_sharing_strategy(),
        "/dev/shm": f"{shm[1] / 2**30:.1f} GiB free of {shm[0] / 2**30:.1f} GiB" if shm else "none",
        "executable": sys.executable,
    }


def _parallel_backend(torch: Any) -> str:
    for line in torch.__config__.parallel_info().splitlines():
        if line.startswith("ATen parallel backend:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def format_report(facts: dict[str, Any] | None = None) -> str:
    """The report as aligned `name: value` lines."""
    facts = report() if facts is None else facts
    if not isinstance(facts, dict):
        raise TypeError(f"facts must be a dict, got {type(facts).__name__}")
    width = max(map(len, facts), default=0)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in facts.items())
