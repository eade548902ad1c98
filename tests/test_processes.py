import contextlib
import gc
import multiprocessing as mp
import time

import pytest

from helpers import pool as pools
from helpers import processes, watchdog
from helpers import worker_deaths as deaths
from helpers.processes import running, stop


def test_running_joins_finished_processes():
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=time.sleep, args=(0.1,)) for _ in range(2)]
    with running(procs):
        pass
    assert [p.exitcode for p in procs] == [0, 0]


def test_running_ends_stuck_processes_even_when_the_block_raises():
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=time.sleep, args=(100,))]
    start = time.monotonic()
    with pytest.raises(KeyError), running(procs, timeout=0.5):
        raise KeyError("the cell failed")
    assert time.monotonic() - start < 10
    assert not procs[0].is_alive() and procs[0].exitcode is not None


def test_stop_skips_processes_never_started():
    proc = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    assert stop([proc]) == [None]


def test_bad_arguments():
    with pytest.raises(ValueError, match="timeout"), running([], timeout=-1):
        pass
    with pytest.raises(TypeError, match="Process objects"), running(["not a process"]):
        pass


def test_join_spawned_has_a_deadline_and_kills_what_is_left():
    import multiprocessing as mp

    import torch.multiprocessing as tmp

    from helpers.pool import delayed_square
    from helpers.processes import join_spawned

    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    quick = tmp.start_processes(delayed_square, nprocs=1, join=False, start_method=method)
    join_spawned(quick, timeout=30)  # rank 0 waits 0 s
    assert [p.exitcode for p in quick.processes] == [0]
    slow = tmp.start_processes(delayed_square, nprocs=4, join=False, start_method=method)  # rank 3 waits 0.6 s
    with pytest.raises(TimeoutError):
        join_spawned(slow, timeout=0.1)
    assert not any(p.is_alive() for p in slow.processes)


def test_remove_error_files_deletes_the_named_files_only(tmp_path):
    class Context:
        error_files = [str(tmp_path / "pytorch-errorfile-a.pickle"), str(tmp_path / "absent.pickle"), None]

    (tmp_path / "pytorch-errorfile-a.pickle").write_bytes(b"x")
    (tmp_path / "other.txt").write_text("kept")
    processes.remove_error_files(Context())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.txt"]


@contextlib.contextmanager
def _without_automatic_gc():
    """Only an explicit collection may free a cycle here, so a test of one cannot pass by the luck of
    an automatic collection."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Cycle:
    def __init__(self, lock):
        self.lock = lock
        self.me = self


def test_collected_after_frees_a_cycle_that_held_a_spawn_lock_once_the_function_returned():
    def holds_a_lock_in_a_cycle() -> str:
        _Cycle(mp.get_context("spawn").Lock())
        return "done"

    before = watchdog.multiprocessing_names()
    with _without_automatic_gc():
        assert processes.collected_after(holds_a_lock_in_a_cycle)() == "done"
        assert watchdog.multiprocessing_names() - before == set()
        holds_a_lock_in_a_cycle()
        assert watchdog.multiprocessing_names() - before, "without the decorator the cycle should still hold the lock"
        gc.collect()
    assert watchdog.multiprocessing_names() - before == set()


@pytest.mark.parametrize(
    "call",
    [
        lambda: pools.pool_error([1, -1, 0], "apply_async", start_method="spawn"),
        lambda: deaths.pool_after_kill(workers=2, timeout=1, start_method="spawn"),
    ],
    ids=["pool_error", "pool_after_kill"],
)
def test_pool_demos_leave_no_semaphore_once_they_return(call):
    before = watchdog.multiprocessing_names()
    with _without_automatic_gc():
        call()
        left = watchdog.multiprocessing_names() - before
    assert not left, f"{len(left)} semaphores still in /dev/shm after the call"
