"""The watchdog must always return, report where a hang was stuck, and leave no process behind."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import time
from pathlib import Path

import psutil
import pytest

from helpers import watchdog

METHODS = [m for m in ("fork", "spawn") if m in mp.get_all_start_methods()]
# How long a hang test lets its child run before the watchdog reads where it is stuck. The deadline counts
# from when the child is ready, and a spawn child then still imports this module to unpickle its target: with
# one core kept busy beside make test, one had not reached its queue after 1.5 s (when the deadline still
# counted from the start, it was stuck in `spawn_main` <- `<module>`).
HANG_AFTER = {"fork": 1.5, "spawn": 10.0}


# Targets live at module level so that spawn children can import them.
def returns(x):
    return x * 2


def raises():
    raise ValueError("boom")


def waits_on_queue():
    queue = mp.get_context("spawn").SimpleQueue()
    queue.get()


def sleeps_forever():
    time.sleep(1000)


def _makes_temp_dir_then_dies():
    from multiprocessing import util

    util.get_temp_dir()  # what a DataLoader worker's resource sharer does before it sends a tensor
    os.kill(os.getpid(), signal.SIGKILL)  # a terminated worker runs no exit handler


def forks_a_child_that_dies_with_a_temp_dir():
    child = mp.get_context("fork").Process(target=_makes_temp_dir_then_dies)
    child.start()
    child.join()
    return child.exitcode


def hangs_in_grandchild():
    child = mp.get_context("spawn").Process(target=sleeps_forever)
    child.start()
    child.join()


def dies_of_sigsegv():
    # raise_signal, not os.kill(getpid()): kill() may deliver the signal to another thread of the process,
    # and this function can then return before the process dies (seen once in a clean run)
    signal.raise_signal(signal.SIGSEGV)


def writes_output():
    print("to stdout")
    os.write(2, b"RuntimeError: written to fd 2 at /some/long/path/file.py\n")
    return "done"


def no_children_left(grace: float = 10.0):
    """Nothing below the test process but multiprocessing's own per-interpreter helpers. torch's
    shared-memory manager (adopted by the test process, a subreaper) exits a few seconds after its last
    client, so it gets `grace` seconds."""
    deadline = time.monotonic() + grace
    while True:
        alive = [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
        alive = [p for p in alive if not is_multiprocessing_helper(p)]
        # Linux cuts process names to 15 characters
        if not alive or time.monotonic() > deadline or any(not p.name().startswith("torch_shm_manag") for p in alive):
            break
        time.sleep(0.2)
    assert not alive, f"leftover processes: {alive}"


def is_multiprocessing_helper(proc):
    cmdline = " ".join(proc.cmdline())
    return "multiprocessing.resource_tracker" in cmdline or "multiprocessing.forkserver" in cmdline


@pytest.mark.parametrize("method", METHODS)
def test_returns(method):
    outcome = watchdog.run(returns, 21, start_method=method, timeout=30)
    assert outcome.status == "returned" and outcome.value == 42
    assert str(outcome) == "returned 42"
    no_children_left()


@pytest.mark.parametrize("method", METHODS)
def test_raises(method):
    outcome = watchdog.run(raises, start_method=method, timeout=30, expect="raise")
    assert outcome.status == "raised"
    assert outcome.error == "ValueError: boom"
    assert str(outcome) == "raised as expected ValueError: boom in `raises`"
    no_children_left()


@pytest.mark.parametrize("method", METHODS)
def test_hang_reports_where_it_was_stuck(method):
    start = time.monotonic()
    after = HANG_AFTER[method]
    outcome = watchdog.run(waits_on_queue, start_method=method, timeout=after, expect="hang")
    assert time.monotonic() - start < after + 10
    assert outcome.status == "hung" and outcome.as_expected
    assert outcome.stuck_in == ["SimpleQueue.get", "waits_on_queue"]
    where = "stuck in `SimpleQueue.get` <- `waits_on_queue`"
    assert str(outcome) == f"hung as expected: killed after {after:.1f} s, {where}"
    no_children_left()


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork: the slow start-up is patched in")
def test_a_child_slow_to_start_is_given_its_whole_timeout_and_shows_its_stack(monkeypatch):
    # a busy machine, made certain: the forked child takes 2 s to get ready, longer than its timeout
    record = watchdog._record_resources

    def slow_record(workdir):
        time.sleep(2.0)
        record(workdir)

    monkeypatch.setattr(watchdog, "_record_resources", slow_record)
    outcome = watchdog.run(waits_on_queue, start_method="fork", timeout=0.5, expect="hang")
    assert outcome.status == "hung" and outcome.seconds >= 2.5, outcome.seconds
    assert outcome.stuck_in == ["SimpleQueue.get", "waits_on_queue"]
    no_children_left()


@pytest.mark.parametrize("method", METHODS)
def test_hang_in_grandchild_kills_the_whole_tree(method):
    outcome = watchdog.run(hangs_in_grandchild, start_method=method, timeout=HANG_AFTER[method] + 0.5)
    assert outcome.status == "hung"
    assert outcome.killed >= 2  # the child and at least the sleeping grandchild
    assert outcome.stuck_in[-1] == "hangs_in_grandchild"
    assert "BaseProcess.join" in outcome.stuck_in
    no_children_left()
    sleepers = [p for p in psutil.process_iter(["cmdline"]) if "sleeps_forever" in " ".join(p.info["cmdline"] or [])]
    assert not sleepers


@pytest.mark.parametrize("method", METHODS)
def test_death_by_signal(method):
    outcome = watchdog.run(dies_of_sigsegv, start_method=method, timeout=30, expect="die")
    assert outcome.status == "died" and outcome.signal == "SIGSEGV"
    assert str(outcome) == "died as expected of SIGSEGV in `dies_of_sigsegv`"
    no_children_left()


def test_output_is_captured_and_cleaned():
    outcome = watchdog.run(writes_output, timeout=30)
    assert outcome.value == "done"
    assert "to stdout" in outcome.stderr
    assert outcome.stderr_error == "RuntimeError: written to fd 2 at …/file.py"


def test_unpicklable_target_fails_in_the_parent():
    def local(x):  # not importable by a spawn child, like a function defined in a notebook
        return x

    # pickling a local function fails in the parent, exactly as multiprocessing would
    with pytest.raises((AttributeError, pickle.PicklingError), match="local"):
        watchdog.run(local, 1, start_method="spawn")


def test_unexpected_outcome_is_flagged():
    outcome = watchdog.run(returns, 1, timeout=30, expect="hang")
    assert str(outcome).startswith("UNEXPECTED (wanted: hang): returned 2")


def test_run_script_returns_and_captures(tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:])\n")
    outcome = watchdog.run_script(script, ["a", "b"], timeout=30)
    assert outcome.status == "returned" and outcome.value == 0
    assert "argv ['a', 'b']" in outcome.stderr


def test_run_script_failure_and_hang(tmp_path):
    failing = tmp_path / "fails.py"
    failing.write_text("raise KeyError('missing')\n")
    outcome = watchdog.run_script(failing, timeout=30)
    assert outcome.status == "raised" and outcome.value == 1
    assert outcome.error == "KeyError: 'missing'"
    hanging = tmp_path / "hangs.py"
    hanging.write_text("import time\n\ndef wait():\n    time.sleep(1000)\n\nwait()\n")
    outcome = watchdog.run_script(hanging, timeout=1.5)
    assert outcome.status == "hung"
    assert outcome.stuck_in == ["wait", "<module>"]
    no_children_left()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"timeout": 0}, ValueError),
        ({"timeout": -1}, ValueError),
        ({"timeout": "3"}, TypeError),
        ({"timeout": True}, TypeError),
        ({"expect": "hangs"}, ValueError),
        ({"start_method": "thread"}, ValueError),
    ],
)
def test_bad_arguments(kwargs, error):
    with pytest.raises(error):
        watchdog.run(returns, 1, **kwargs)


def test_bad_target_and_script(tmp_path):
    with pytest.raises(TypeError, match="target must be callable"):
        watchdog.run(42)
    with pytest.raises(ValueError, match="existing file"):
        watchdog.run_script(tmp_path / "missing.py")
    with pytest.raises(TypeError, match="args must be"):
        watchdog.run_script(__file__, "a b")
    with pytest.raises(TypeError, match="script must be a path"):
        watchdog.run_script(3)


def leaves_a_file_system_tensor():
    import torch

    torch.multiprocessing.set_sharing_strategy("file_system")
    tensor = torch.zeros(1000).share_memory_()
    return tensor.is_shared()


def test_torch_shm_manager_gets_to_clean_up():
    before = {f for f in os.listdir("/dev/shm") if f.startswith("torch_")} if os.path.isdir("/dev/shm") else set()
    outcome = watchdog.run(leaves_a_file_system_tensor, timeout=60)
    assert outcome.value is True
    after = {f for f in os.listdir("/dev/shm") if f.startswith("torch_")} if os.path.isdir("/dev/shm") else set()
    assert after <= before
    no_children_left()


def ghost(x):
    return x


def test_main_module_function_fails_in_a_spawn_child_with_the_real_error(monkeypatch):
    """What a notebook does: the function lives in the parent's __main__, which a spawn child lacks."""
    import sys

    monkeypatch.setattr(ghost, "__module__", "__main__")
    monkeypatch.setattr(ghost, "__qualname__", "ghost_in_main")
    monkeypatch.setattr(sys.modules["__main__"], "ghost_in_main", ghost, raising=False)
    outcome = watchdog.run(ghost, 1, start_method="spawn", timeout=30)
    assert outcome.status == "raised"
    # The child's __main__ is the kernel's (`'__main__' (built-in)`) under `python -m pytest`, but the
    # re-imported launcher script (`'__mp_main__' from .../pytest`) when pytest runs as a script.
    assert outcome.error.startswith("AttributeError: Can't get attribute 'ghost_in_main' on <module '__m")


ORPHAN_MAKER = """
import _multiprocessing, os, signal, sys
# A named semaphore nobody registered (as when a process is killed between creating and registering it).
_multiprocessing.SemLock(1, 1, 1, sys.argv[1], False)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
def test_orphaned_semaphores_are_removed_but_live_ones_stay():
    import subprocess
    import sys

    before = watchdog.multiprocessing_names()
    orphan = f"/mp-orphan{os.getpid()}"
    subprocess.run([sys.executable, "-c", ORPHAN_MAKER, orphan], timeout=30, check=False)
    assert os.path.exists(f"/dev/shm/sem{orphan.replace('/', '.')}")
    live = mp.get_context("spawn").Lock()  # created during the "run" too, but still in use here
    live_file = f"/dev/shm/sem{live._semlock.name.replace('/', '.')}"
    glibc_temp = "/dev/shm/sem.Zq3x9K"  # what a sem_open killed before it linked the name leaves
    with open(glibc_temp, "wb") as f:
        f.write(b"\0" * 32)
    watchdog.remove_orphans(before)
    assert not os.path.exists(f"/dev/shm/sem{orphan.replace('/', '.')}")
    assert not os.path.exists(glibc_temp)
    assert os.path.exists(live_file)
    del live


@pytest.mark.skipif("fork" not in METHODS, reason="needs the fork start method")
@pytest.mark.parametrize("method", METHODS)
def test_a_killed_grandchild_leaves_no_mp_temp_dir(method, monkeypatch):
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="wd-"))  # short: socket paths inside must fit 103 bytes
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(folder))
        monkeypatch.setenv("TMPDIR", str(folder))  # a spawn child reads it afresh
        # as in a kernel that never needed one (the suite's conftest gives this process one, which forks reuse)
        monkeypatch.delitem(mp.current_process()._config, "tempdir", raising=False)
        outcome = watchdog.run(forks_a_child_that_dies_with_a_temp_dir, timeout=30, start_method=method)
        assert outcome.value == -signal.SIGKILL
        assert not list(folder.iterdir())
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_new_shm_name_counts_as_left_only_while_no_process_maps_it():
    """The session's hygiene check (conftest.py) reports a new /dev/shm name only when nothing maps it: a
    name some live process maps is a live object, and another program's when none of ours is left."""
    import mmap

    import conftest

    path = Path("/dev/shm") / f"sem.mp-hygiene{os.getpid()}"
    path.write_bytes(b"\0" * 32)
    try:
        assert conftest._unmapped({path.name, "sem.mp-never-made"}) == [path.name]
        with open(path, "r+b") as file, mmap.mmap(file.fileno(), 32):
            assert path.stat().st_ino in watchdog.mapped_inodes()
            assert conftest._unmapped({path.name}) == []
        assert conftest._unmapped({path.name}) == [path.name]
    finally:
        path.unlink()
