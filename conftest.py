"""Session-wide process hygiene: after all tests and notebooks, nothing they started may still run, and
nothing new may be left in /dev/shm or in the temporary folder.

It lives at the repository root so that it also runs for `pytest --nbval notebooks` (the spawn pass of
`make test`): pytest only loads a conftest.py from the directories of the collected paths and their parents.

On Linux the test process becomes a *child subreaper*: a grandchild whose parent died (a kernel killed
by nbval, a watchdog child killed on time-out) is re-parented to the test process instead of init, so a
leaked process anywhere below us shows up in `psutil.Process().children()`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

_SHM = Path("/dev/shm")
_GRACE = 20.0  # seconds: kernels' resource trackers clean up and exit after nbval stops the kernels
_PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _shm_files() -> set[str]:
    return {p.name for p in _SHM.iterdir()} if _SHM.is_dir() else set()


# pytest keeps its own `tmp_path` folders (the last three sessions) under the temporary folder on purpose.
_TMP_OWNED_BY_PYTEST = re.compile(r"^pytest-of-")


def _unmapped(names: set[str]) -> list[str]:
    """The names no live process maps. A live semaphore or shared block is mapped by the process holding
    it, so a name still mapped belongs to a live object: ours would be held by one of our processes (each
    reported above as still running), so one mapped only elsewhere is another program's. In `make test` the
    notebook passes run beside the unit pass, and their kernels hold named semaphores under spawn and
    forkserver (a tqdm bar alone makes one, `sem.mp-*`, that lives as long as its process): two new names
    failed a unit test file once (run ar of session 23), with nothing to tell whose they were."""
    from helpers.watchdog import unmapped

    return unmapped(names)


def _tmp_entries() -> set[str]:
    """Names in the temporary folder (TMPDIR, else /tmp): what multiprocessing (`pymp-*`), torch
    (`pytorch-errorfile-*`, `torchelastic_*`, `torchinductor_*`) and kernels create there."""
    folder = Path(tempfile.gettempdir())
    return {p.name for p in folder.iterdir() if not _TMP_OWNED_BY_PYTEST.match(p.name)} if folder.is_dir() else set()


def _reap_zombies() -> None:
    """Collect exit statuses of adopted orphans that have ended, so they do not count as alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# Started by multiprocessing for the test process itself; they end when it does.
_OWN_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _alive_descendants() -> list[psutil.Process]:
    me = os.getpid()
    alive = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.ppid() == me and any(h in " ".join(proc.cmdline()) for h in _OWN_HELPERS):
                continue
            alive.append(proc)
        except psutil.Error:
            pass
    return alive


def _stop_kernel_as_jupyterlab_does(self) -> None:  # noqa: ANN001 - replaces nbval's RunningKernel.stop
    """nbval kills each notebook's kernel at the end (`shutdown_kernel(now=True)`); JupyterLab asks it to
    shut down, which runs the kernel's exit handlers, among them multiprocessing's removal of its
    `pymp-*` folder from the temporary folder. Stop kernels the way a learner's JupyterLab does, so that
    the temporary-folder check sees what a learner's machine would keep, not an artefact of the runner.
    A kernel that does not exit within jupyter_client's grace (5 s) is still killed."""
    self.kc.stop_channels()
    self.km.shutdown_kernel(now=False)
    del self.km


_IPC_DIR: str | None = None  # this session's folder for its kernels' sockets


def _start_kernel_on_unix_sockets(startup_timeout: int = 60, kernel_name: str = "python", **kwargs):  # noqa: ANN202
    """nbval's `start_new_kernel`, with the kernel's five ZMQ sockets as Unix sockets in a folder of this
    session's instead of TCP ports.

    Over TCP, jupyter_client picks five free ports, releases them, and the kernel binds them once it has
    started, seconds later: any process that asks for a free port in between (the notebooks' torch
    stores and gloo, the unit tests, the other passes' kernels, all on this machine at once in
    `make test`) can take one, and the kernel dies before it replies ("Kernel died before replying to
    kernel_info", seen once here; jupyter/jupyter_client#276). Sockets in a folder of our own cannot
    collide. What a cell does or prints does not depend on how its kernel talks to nbval."""
    from nbval.kernel import KernelManager, NbvalKernelspecManager

    from helpers.watchdog import _UNIX_SOCKET_PATH  # the room in a socket's address, as the watchdog uses it

    prefix = os.path.join(_IPC_DIR or tempfile.gettempdir(), "kernel")
    # a very long TMPDIR keeps TCP
    ipc = {"transport": "ipc", "ip": prefix} if len(os.fsencode(prefix)) + len("-99") <= _UNIX_SOCKET_PATH else {}
    km = KernelManager(kernel_name=kernel_name, kernel_spec_manager=NbvalKernelspecManager(), **ipc)
    km.start_kernel(**kwargs)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=startup_timeout)
    except RuntimeError:
        kc.stop_channels()
        km.shutdown_kernel()
        raise
    return km, kc


def pytest_configure(config: pytest.Config) -> None:
    global _IPC_DIR
    # Only where nbval runs: the unit pass keeps the plugin out of its processes (tests/passes.py).
    if config.pluginmanager.has_plugin("nbval"):
        from nbval import kernel

        kernel.RunningKernel.stop = _stop_kernel_as_jupyterlab_does
        # made before the session's first look at the temporary folder, removed after its last
        _IPC_DIR = tempfile.mkdtemp(prefix="nbval-ipc-")
        kernel.start_new_kernel = _start_kernel_on_unix_sockets


def pytest_unconfigure(config: pytest.Config) -> None:
    if _IPC_DIR is not None:
        shutil.rmtree(_IPC_DIR, ignore_errors=True)


def _own_mp_temp_dir() -> str:
    """The test process's own `pymp-*` folder, made now if it has none. multiprocessing removes it when
    this process exits, after the check below; forked children reuse it instead of making (and, when
    killed, leaving) folders of their own, as they would in a kernel that has one."""
    from multiprocessing import util

    return os.path.basename(util.get_temp_dir())


def pytest_sessionstart(session: pytest.Session) -> None:
    _become_subreaper()
    session.config._shm_before = _shm_files()  # type: ignore[attr-defined]
    session.config._shm_made_by = {}  # type: ignore[attr-defined]
    _own_mp_temp_dir()
    session.config._tmp_before = _tmp_entries()  # type: ignore[attr-defined]
    session.config._tmp_made_by = {}  # type: ignore[attr-defined]


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move everything the imports made (torch's modules above all: about 170,000 objects) out of the
    garbage collector's sight. The helpers call `gc.collect()` after each run that may leave semaphores in
    reference cycles, and with torch loaded each call walked all of those objects again: about 0.08 s, 66 s
    of CPU over the unit pass's 537 calls. Objects made by the tests themselves are collected as before,
    and forked children inherit the frozen generation."""
    import gc

    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Note which test (or notebook cell) a /dev/shm or temporary-folder name first appeared during, so
    that a leak found at the end of the session names its likely origin instead of just a random name."""
    before, tmp_before = _shm_files(), _tmp_entries()
    yield
    _own_mp_temp_dir()  # again, if a test removed it (environment.remove_mp_temp_dir)
    made_by = item.config._shm_made_by  # type: ignore[attr-defined]
    for name in _shm_files() - before:
        made_by.setdefault(name, item.nodeid)
    tmp_made_by = item.config._tmp_made_by  # type: ignore[attr-defined]
    for name in _tmp_entries() - tmp_before:
        tmp_made_by.setdefault(name, item.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config._shm_before  # type: ignore[attr-defined]
    tmp_before = session.config._tmp_before  # type: ignore[attr-defined]
    deadline = time.monotonic() + _GRACE
    while True:
        _reap_zombies()
        leaked = _alive_descendants()
        new_shm = _unmapped(_shm_files() - before)
        new_tmp = sorted(_tmp_entries() - tmp_before - {_own_mp_temp_dir()})
        if (not leaked and not new_shm and not new_tmp) or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    problems = []
    for proc in leaked:
        with contextlib.suppress(psutil.Error):
            problems.append(f"process still running: pid {proc.pid}: {' '.join(proc.cmdline())[:200]}")
    made_by = session.config._shm_made_by  # type: ignore[attr-defined]
    problems += [
        f"file left in /dev/shm: {name} (appeared during {made_by.get(name, 'no single test')})" for name in new_shm
    ]
    tmp_made_by = session.config._tmp_made_by  # type: ignore[attr-defined]
    folder = tempfile.gettempdir()
    problems += [
        f"left in the temporary folder {folder}: {name} (appeared during {tmp_made_by.get(name, 'no single test')})"
        for name in new_tmp
    ]
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = ["process hygiene check FAILED:", *problems]
        if reporter is not None:
            reporter.write_line("\n".join(lines), red=True)
        else:
            print("\n".join(lines), file=sys.stderr)
        for proc in leaked:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
