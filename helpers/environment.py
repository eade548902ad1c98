"""What this machine offers to parallel code: cores, start methods, shared memory, torch's threads.

Every chapter sizes its experiments from these numbers (workers = usable cores, shared payloads a
fraction of free /dev/shm), and the notebooks print them in ignored cells, since they differ per machine.
torch is imported only inside `report()`, so that importing this module stays cheap in a spawned child.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import platform
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "usable_cores",
    "shm_bytes",
    "default_start_method",
    "default_context",
    "remove_mp_temp_dir",
    "report",
    "format_report",
    "pinnable_cores",
    "pinned",
]


def usable_cores() -> int:
    """Cores this process may run on: the affinity mask where the OS has one (Linux), else the count.

    `os.cpu_count()` reports the machine; containers and `taskset` often allow fewer, and sizing a pool
    from the machine's count oversubscribes the cores you actually have.
    """
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pinnable_cores() -> list[int] | None:
    """The cores this process may pin itself (or a child) to, in order; None where the OS offers no pinning
    (`os.sched_setaffinity` exists on Linux only, not on macOS or Windows). A figure that must not depend
    on which core a process lands on (a virtual machine's host can slow one core at a time) pins to these."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    return sorted(os.sched_getaffinity(0))


@contextlib.contextmanager
def pinned(core: int | None) -> Iterator[None]:
    """This process runs on `core` alone inside the block, and where it could before afterwards; `None`
    leaves it where it is. Processes started inside the block inherit the pin: start them outside."""
    if core is None:
        yield
        return
    cores = pinnable_cores()
    if cores is None:
        raise ValueError("pinning to a core needs os.sched_setaffinity, which only Linux has; pass None here")
    if isinstance(core, bool) or not isinstance(core, int) or core not in cores:
        raise ValueError(f"core must be one of this process's cores {cores}, got {core!r}")
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)


def _mounts(mountinfo: str) -> list[tuple[str, str, str, str]]:
    """(fstype, hierarchy root, mount point, super options) of every cgroup mount in /proc/self/mountinfo."""
    mounts = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            mounts.append((tail[0], fields[3], fields[4], tail[2]))
    return mounts


def _cgroup_dirs(proc_cgroup: str, mountinfo: str, root: Path) -> list[tuple[str, Path]]:
    """("v2" or "v1", folder) of this process's cpu cgroup and each ancestor up to the mount's root.

    The path in /proc/self/cgroup is relative to the hierarchy's root, and a container mounts a subtree
    of it, so the folder is the mount point plus the path below the mount's own root; an ancestor's
    quota limits us as well, so every level is read.
    """
    found = []
    for fstype, mount_root, point, options in _mounts(mountinfo):
        for line in proc_cgroup.splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            _, controllers, path = parts
            if fstype == "cgroup2" and parts[0] == "0" and controllers == "":
                version = "v2"
            elif fstype == "cgroup" and "cpu" in controllers.split(",") and "cpu" in options.split(","):
                version = "v1"
            else:
                continue
            rel = os.path.relpath(path, mount_root) if path.startswith(mount_root) else "."
            rel = "." if rel.startswith("..") else rel
            base = root / point.lstrip("/")
            level = base / rel
            while True:
                found.append((version, level))
                if level == base or base not in level.parents:
                    break
                level = level.parent
    return found


def cpu_quota(
    proc_cgroup: Path = Path("/proc/self/cgroup"),
    mountinfo: Path = Path("/proc/self/mountinfo"),
    root: Path = Path("/"),
) -> float | None:
    """The CPU quota in cores (e.g. 1.5 for `docker --cpus 1.5`), or None when no quota is set.

    cgroup v2: `cpu.max` holds "max PERIOD" or "QUOTA PERIOD"; v1: `cpu.cfs_quota_us` (-1 for none) over
    `cpu.cfs_period_us`. os.sched_getaffinity does not see a quota, and torch's thread count ignores it.
    """
    try:
        dirs = _cgroup_dirs(proc_cgroup.read_text(), mountinfo.read_text(), root)
    except OSError:
        return None
    quotas = []
    for version, folder in dirs:
        try:
            if version == "v2":
                quota, _, period = (folder / "cpu.max").read_text().strip().partition(" ")
            else:
                quota = (folder / "cpu.cfs_quota_us").read_text().strip()
                period = (folder / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            continue
        if quota not in ("max", "-1") and quota.lstrip("-").isdigit() and period.isdigit() and int(period) > 0:
            quotas.append(int(quota) / int(period))
    return min(quotas) if quotas else None


def openmp_runtime() -> str:
    """Which OpenMP runtime this process has loaded (read from /proc/self/maps, Linux only; import torch
    first): the fork hang of notebooks 00 and 06 is GNU libgomp's; Intel's runtime (and LLVM's libomp,
    derived from it) re-create their threads in a forked child."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "unknown (no /proc/self/maps on this platform)"
    found = [name for key, name in _OPENMP_LIBRARIES if key in maps]
    return ", ".join(found) if found else "none loaded"


_OPENMP_LIBRARIES = (("libgomp", "GNU libgomp"), ("libiomp", "Intel libiomp"), ("libomp.", "LLVM libomp"))


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
