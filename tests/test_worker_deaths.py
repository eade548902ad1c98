"""helpers.worker_deaths: what each API does when one of its workers is killed (notebook 04, section 6),
and a refused allocation against an OOM kill; bad input is refused by name."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

from helpers import pool as pools
from helpers import watchdog
from helpers import worker_deaths as deaths

HAS_FORK = "fork" in mp.get_all_start_methods()


def test_a_killed_pool_worker_is_replaced_but_its_result_never_comes():
    run = deaths.pool_after_kill(workers=2, timeout=1)
    assert run == {
        "map_async(...).get(timeout=1) raised TimeoutError": True,
        "the killed worker was replaced": True,
        "a new map on the same pool returned": [1, 2, 3, 4],
    }


def test_pool_map_waits_forever_for_a_killed_workers_task():
    outcome = watchdog.run(deaths.map_while_killing, timeout=5, expect="hang")
    assert outcome.status == "hung", outcome
    assert "Pool.map" in outcome.stuck_in, outcome.stuck_in


def test_a_killed_executor_worker_breaks_every_future_at_once():
    run = deaths.executor_after_kill(workers=2)
    assert run["futures that failed"] == "4 of 4"
    assert run["their error"] == (
        "BrokenProcessPool: A process in the process pool was terminated abruptly while the future was running"
        " or pending."
    )
    assert run["a new submit"].startswith("BrokenProcessPool: A child process terminated abruptly")
    assert run["seconds from the kill to the last failure"] < deaths._WAIT  # noqa: SLF001 - not the time-out


@pytest.mark.skipif(not HAS_FORK, reason="needs the fork start method")
def test_max_tasks_per_child_refuses_fork_and_picks_spawn_by_itself():
    assert deaths.max_tasks_per_child_error().startswith(
        "ValueError: max_tasks_per_child is incompatible with the 'fork' multiprocessing start method"
    )
    assert deaths.executor_worker_pids(tasks=4, max_tasks_per_child=2) == {
        "start method it chose": "spawn",
        "processes that ran the 4 tasks": 2,
    }


def test_the_executor_demo_leaves_no_semaphore_while_something_keeps_its_manager_thread(monkeypatch):
    # In a Jupyter kernel, ipykernel keeps every thread that flushed stdout (the manager thread does, when it
    # starts a replacement worker) for up to 10 s: hold them here the same way.
    from concurrent.futures import process

    kept = []
    original = process._ExecutorManagerThread.__init__  # noqa: SLF001

    def keep(self, executor):
        original(self, executor)
        kept.append(self)

    monkeypatch.setattr(process._ExecutorManagerThread, "__init__", keep)  # noqa: SLF001
    before = watchdog.multiprocessing_names()
    deaths.executor_worker_pids(tasks=4, max_tasks_per_child=2)
    assert kept, "no manager thread was made"
    left = watchdog.multiprocessing_names() - before
    assert not left, f"semaphores still in /dev/shm while the thread is kept: {sorted(left)}"


@pytest.mark.skipif(not HAS_FORK, reason="the demo pins fork workers")
def test_a_killed_loader_worker_is_reported_with_its_signal_and_leaves_no_folder(tmp_path):
    before = set(tmp_path.parent.iterdir())
    run, _left = deaths.in_private_tmp(deaths.loader_after_kill, 2, "fork", start_method="fork")
    assert run == {
        "raised": "RuntimeError: DataLoader worker (pid(s) N) exited unexpectedly",
        "raised from": "RuntimeError: DataLoader worker (pid N) is killed by signal: Killed.",
    }
    assert not {p for p in set(tmp_path.parent.iterdir()) - before if p.name.startswith("course-kill-")}


def test_a_killed_spawn_rank_is_a_process_exited_exception_naming_the_signal():
    run = deaths.spawn_after_kill(nprocs=2)
    assert run["raised"] == f"ProcessExitedException: process {deaths.VICTIM} terminated with signal SIGKILL"
    assert run["exit_code"] == -9 and run["signal_name"] == "SIGKILL"
    assert sorted(run["exit codes"]) == [-15, -9]


def test_in_private_tmp_reports_a_failing_function():
    with pytest.raises(RuntimeError, match="raised ValueError"):
        deaths.in_private_tmp(pools.delayed_square, -1, timeout=30)
    with pytest.raises(TypeError, match="fn"):
        deaths.in_private_tmp("loader_after_kill")


def test_kill_demo_arguments_are_checked():
    for call, name in (
        (lambda: deaths.pool_after_kill(workers=0), "workers"),
        (lambda: deaths.pool_after_kill(timeout=-1), "timeout"),
        (lambda: deaths.executor_after_kill(workers=0), "workers"),
        (lambda: deaths.loader_after_kill(num_workers=0), "num_workers"),
        (lambda: deaths.spawn_after_kill(nprocs=1), "nprocs"),
        (lambda: deaths.map_while_killing(workers=0), "workers"),
        (lambda: deaths.executor_worker_pids(max_tasks_per_child=0), "max_tasks_per_child"),
        (lambda: deaths.HoldDataset(0, None, None, None), "size"),
        (lambda: deaths.kill_when_started(None, None, timeout=-1), "timeout"),
    ):
        with pytest.raises(ValueError, match=name):
            call()


def test_kill_when_started_gives_up_when_nobody_starts():
    started = mp.get_context("spawn").Semaphore(0)
    with pytest.raises(TimeoutError, match="did not start"):
        deaths.kill_when_started(started, None, timeout=0.1)
    del started


RUNS = {
    "pool_run": {
        "map_async(...).get(timeout=2) raised TimeoutError": True,
        "the killed worker was replaced": True,
        "a new map on the same pool returned": [1, 2, 3, 4],
    },
    "executor_run": {
        "futures that failed": "4 of 4",
        "their error": "BrokenProcessPool: A process in the process pool was terminated abruptly ...",
        "a new submit": "BrokenProcessPool: A child process terminated abruptly, ...",
        "seconds from the kill to the last failure": 0.01,
    },
    "loader_run": {
        "raised": "RuntimeError: DataLoader worker (pid(s) N) exited unexpectedly",
        "raised from": "RuntimeError: DataLoader worker (pid N) is killed by signal: Killed.",
    },
    "spawn_run": {
        "raised": "ProcessExitedException: process 0 terminated with signal SIGKILL",
        "exit_code": -9,
        "signal_name": "SIGKILL",
        "exit codes": [-9, -15],
    },
}


def test_death_rows_say_what_each_api_did():
    rows = {row[0]: row[1:] for row in deaths.death_rows(**RUNS)}
    assert list(rows) == [
        "multiprocessing.Pool",
        "ProcessPoolExecutor",
        "DataLoader",
        "torch.multiprocessing.spawn",
        "torchrun",
    ]
    assert rows["multiprocessing.Pool"] == (
        "nothing: map() waits forever, map_async(...).get(t) raises TimeoutError",
        "no",
        "worker replaced, pool still works",
    )
    assert rows["ProcessPoolExecutor"] == (
        "BrokenProcessPool on 4 of 4 futures",
        "no",
        "broken: a new submit raises BrokenProcessPool",
    )
    assert rows["DataLoader"][0] == (
        "RuntimeError: DataLoader worker (pid(s) N) exited unexpectedly, from RuntimeError: DataLoader worker"
        " (pid N) is killed by signal: Killed."
    )
    assert rows["DataLoader"][1] == "yes (the cause)"
    assert rows["torch.multiprocessing.spawn"] == (
        "ProcessExitedException: process 0 terminated with signal SIGKILL",
        "yes",
        "the other ranks get SIGTERM",
    )
    assert "notebook 07" in rows["torchrun"][2] and "--max-restarts" in rows["torchrun"][2]


def test_death_rows_follow_the_runs_and_refuse_bad_input():
    silent = dict(RUNS, loader_run={"raised": "RuntimeError: ... exited unexpectedly", "raised from": "Empty"})
    assert dict((r[0], r[2]) for r in deaths.death_rows(**silent))["DataLoader"] == "no"
    got = dict(RUNS, pool_run={**RUNS["pool_run"], "map_async(...).get(timeout=2) raised TimeoutError": False})
    assert deaths.death_rows(**got)[0][1] == "its result (unexpected)"
    with pytest.raises(TypeError, match="spawn_run"):
        deaths.death_rows(**dict(RUNS, spawn_run="SIGKILL"))
    with pytest.raises(ValueError, match="lacks a field"):
        deaths.death_rows(**dict(RUNS, executor_run={}))


def test_death_table_prints_one_block_per_api():
    table = deaths.death_table(deaths.death_rows(**RUNS))
    lines = table.splitlines()
    assert lines[0] == "multiprocessing.Pool"
    assert sum(1 for line in lines if not line.startswith(" ")) == 5
    assert "  names the signal      yes (exit code)" in table
    with pytest.raises(ValueError, match="rows"):
        deaths.death_table([])
    with pytest.raises(ValueError, match="rows"):
        deaths.death_table([("too", "short")])


# ---- memory: a refused allocation vs an OOM kill -----------------------------------------------------


def test_a_refused_allocation_is_an_exception_with_exit_code_1():
    assert deaths.allocation_under_limit("python") == {"exit code": 1, "error": "MemoryError"}
    torch_run = deaths.allocation_under_limit("torch")
    assert torch_run["exit code"] == 1
    assert torch_run["error"].startswith("RuntimeError: DefaultCPUAllocator: can't allocate memory")
    with pytest.raises(ValueError, match="kind"):
        deaths.allocation_under_limit("numpy")
    with pytest.raises(ValueError, match="want_mb"):
        deaths.allocation_under_limit(spare_mb=64, want_mb=64)


@pytest.mark.parametrize("use_cgroup", [True, False])
def test_an_oom_kill_is_sigkill_after_the_memory_grew(use_cgroup):
    run = deaths.oom_kill(limit_mb=64, step_mb=4, use_cgroup=use_cgroup)
    assert run.exitcode == -9
    assert run.limit_mb // 2 <= run.grown_mb < 4 * run.limit_mb
    assert max(run.rss_mb) > run.limit_mb / 2
    if not use_cgroup or deaths.memory_cgroup_parent() is None:
        assert run.killer == "a watcher in this process"
    else:
        assert run.killer == "the kernel (memory cgroup)"
        assert deaths.kernel_log_says_oom(run.pid) in (True, None)
        assert not [p for p in os.listdir(deaths.memory_cgroup_parent()) if p.startswith("course-oom-")]


def test_a_v2_memory_cgroup_gets_its_limit_and_no_swap(monkeypatch, tmp_path):
    """This machine has cgroup v1 only: the v2 branch is checked on a folder that looks like one."""
    monkeypatch.setattr(deaths, "memory_cgroup_parent", lambda: str(tmp_path))
    folder = deaths._make_memory_cgroup(64)
    assert folder == str(tmp_path / f"course-oom-{os.getpid()}")
    assert (tmp_path / os.path.basename(folder) / "memory.max").read_text() == str(64 * 1024 * 1024)
    assert (tmp_path / os.path.basename(folder) / "memory.swap.max").read_text() == "0"


def test_an_oom_kill_falls_back_to_the_watcher_when_the_kernel_refuses_the_move(monkeypatch, tmp_path):
    refusing = tmp_path / "refusing"
    (refusing / "cgroup.procs").mkdir(parents=True)  # writing the pid fails, as the kernel may refuse it
    monkeypatch.setattr(deaths, "_make_memory_cgroup", lambda limit_mb: str(refusing))
    monkeypatch.setattr(deaths, "_remove_cgroup", lambda folder: None)
    run = deaths.oom_kill(limit_mb=64, step_mb=4)
    assert run.killer == "a watcher in this process"
    assert run.exitcode == -9 and run.grown_mb < 4 * 64


def test_oom_kill_arguments_are_checked():
    with pytest.raises(ValueError, match="limit_mb"):
        deaths.oom_kill(limit_mb=8)
    with pytest.raises(ValueError, match="step_mb"):
        deaths.oom_kill(step_mb=0)
    with pytest.raises(TypeError, match="use_cgroup"):
        deaths.oom_kill(use_cgroup="yes")
