"""helpers.pool: each experiment reports what notebook 04 says, and bad input is refused by name."""

from __future__ import annotations

import functools
import importlib.util
import math
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import example_runner
import pytest
import torch

from helpers import pool as pools
from helpers import watchdog
from helpers import worker_deaths as deaths

HAS_FORK = "fork" in mp.get_all_start_methods()
ITEMS = [3, 2, 1, 0]
PLUS_ONE = lambda x: x + 1  # noqa: E731 - a module-level lambda, like one typed in a notebook


def test_delayed_square_waits_more_for_larger_items_and_refuses_bad_items():
    assert pools.delayed_square(0) == 0 and pools.delayed_square(2) == 4
    assert pools.power(3, 2) == 9
    assert pools.in_a_loop([2, 0]) == [4, 0]
    with pytest.raises(ValueError, match="item must be >= 0"):
        pools.delayed_square(-1)
    with pytest.raises(TypeError, match="x must be an int"):
        pools.delayed_square(1.5)


def test_processes_with_queues_return_in_order_and_record_arrival():
    run = pools.with_processes(ITEMS)
    assert run.results == [9, 4, 1, 0]
    assert run.arrival == [3, 2, 1, 0]  # the shortest task (last item) comes back first
    assert run.exitcodes == [0, 0, 0, 0]


def test_processes_reraise_a_worker_exception_in_the_parent():
    with pytest.raises(ValueError, match="item must be >= 0, got -1"):
        pools.with_processes([1, -1, 0], workers=2)


def test_a_worker_that_dies_is_noticed_instead_of_waited_for():
    outcome = watchdog.run(pools.with_processes, [1, -1, 0], workers=2, catch=False, timeout=30)
    assert outcome.status == "raised" and "ChildProcessError" in outcome.error
    assert outcome.stderr_error == "ValueError: item must be >= 0, got -1"


def test_process_arguments_are_checked():
    with pytest.raises(ValueError, match="workers"):
        pools.with_processes(ITEMS, workers=0)
    with pytest.raises(ValueError, match="start_method"):
        pools.with_processes(ITEMS, start_method="thread")


def test_pool_methods_order_results_except_imap_unordered():
    out = pools.with_pool(ITEMS)
    for method in ("map", "imap", "starmap", "apply_async"):
        assert out[method] == [9, 4, 1, 0], method
    assert out["imap_unordered"] == [0, 1, 4, 9]


def test_pool_errors_reach_the_parent_with_their_type():
    for method in ("map", "imap", "apply_async"):
        assert pools.pool_error([1, -1], method) == "ValueError: item must be >= 0, got -1"
    assert pools.pool_error([1, 0]) == "no error"
    with pytest.raises(ValueError, match="method"):
        pools.pool_error([1], "starmap")


def test_spawn_runs_fn_with_rank_and_returns_a_context():
    report = pools.with_spawn([2, 1, 0], nprocs=2)
    assert report["returned"] == "ProcessContext"
    assert report["join(timeout=0) right after start"] is False and report["join() at the end"] is True
    # join() returns once any rank has ended, with whether all have (issue 31, point 1)
    assert report["first join() while rank 0 waits"] is False and report["rank 0 still running then"] is True
    assert report["results"] == [4, 1, 0] and report["exit codes"] == [0, 0]
    with pytest.raises(ValueError, match="nprocs"):
        pools.with_spawn([1], nprocs=0)


def test_spawn_helpers_never_redirect_the_temporary_folder(monkeypatch):
    """Python 3.14's forkserver keeps its socket in a pymp-* folder under tempfile's folder: a process-wide
    redirect to a folder that is then deleted breaks every later start (issue 21). Record the folder
    tempfile names while torch starts the ranks."""
    import tempfile

    import torch.multiprocessing  # noqa: F401 - loads the module patched below

    spawn_module = sys.modules["torch.multiprocessing.spawn"]  # `torch.multiprocessing.spawn` is the function
    seen = []
    real = spawn_module.start_processes

    def recording(*args, **kwargs):
        seen.append((tempfile.tempdir, tempfile.gettempdir()))
        return real(*args, **kwargs)

    monkeypatch.setattr(spawn_module, "start_processes", recording)
    saved = (tempfile.tempdir, tempfile.gettempdir())
    pools.with_spawn([1, 0], nprocs=2)
    pools.spawn_failure(nprocs=2, seconds=30)
    assert seen == [saved, saved]


def test_spawn_failure_raises_and_terminates_the_other_ranks():
    import tempfile
    from pathlib import Path

    def error_files() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob("pytorch-errorfile-*"))

    before = error_files()
    report = pools.spawn_failure(nprocs=2, seconds=30)
    assert report["raised"] == "ProcessRaisedException: -- Process 1 terminated with the following error:"
    assert report["original error (last line)"] == "ValueError: rank 1 failed on purpose"
    assert report["error_index"] == 1
    assert report["exit codes"] == [-15, 1]  # rank 0 was sent SIGTERM
    assert error_files() <= before, "the failing rank's error file must not be left behind"
    with pytest.raises(ValueError, match="nprocs"):
        pools.spawn_failure(nprocs=1)


def test_only_a_rank_with_a_sigterm_handler_saves_when_join_ends_the_job():
    """grace_period or not, the other ranks hear of a failure only through SIGTERM (issue 31, point 10)."""
    report = pools.spawn_failure(nprocs=3, seconds=30, save_on_sigterm=True)
    assert report["original error (last line)"] == "ValueError: rank 1 failed on purpose"
    assert report["exit codes"] == [-15, 1, 0]
    assert report["saved by its SIGTERM handler"] == [False, False, True]
    with pytest.raises(ValueError, match="nprocs"):
        pools.spawn_failure(nprocs=2, save_on_sigterm=True)
    with pytest.raises(TypeError, match="save_on_sigterm"):
        pools.spawn_failure(nprocs=3, save_on_sigterm="yes")


@pytest.mark.parametrize("way, workers", [("loop", 1), ("pool", 3), ("process", 3)])
def test_collect_and_train_logs_every_step_and_learns(way, workers):
    run = pools.collect_and_train(workers, tasks=24, delay=0.005, way=way)
    assert run.way == way and run.workers == workers
    assert not torch.isnan(run.combined).any()
    assert int((~torch.isnan(run.log)).sum()) == 24  # each task logged once, in its process's row
    assert run.combined[-1] < run.combined[0] / 10
    assert run.weight_error < 0.1 and run.seconds > 0 and run.tasks_per_s > 0


def test_collect_and_train_refuses_bad_arguments():
    for kwargs, name in (
        ({"workers": 0}, "workers"),
        ({"workers": 1, "tasks": 0}, "tasks"),
        ({"workers": 1, "kind": "gpu"}, "kind"),
        ({"workers": 1, "way": "thread"}, "way"),
        ({"workers": 2, "way": "loop"}, "workers must be 1"),
        ({"workers": 1, "delay": -1}, "delay"),
    ):
        with pytest.raises(ValueError, match=name):
            pools.collect_and_train(**kwargs)
    with pytest.raises(TypeError, match="workers"):
        pools.collect_and_train(1.5)


def test_scaling_runs_one_pool_per_worker_count_and_the_shared_model_learns():
    # What the speed-ups say (waiting workers overlap past the cores, CPU-bound ones do not) is a measured
    # claim: notebook 04 prints it for 48 tasks and `python -m helpers.bench` reports it (pool_io_scaling,
    # with its floor). Asserted here on 24 tasks, it failed once with one core kept busy beside make test
    # (1.48x, the 4 workers' 24 waits of 20 ms took 0.38 s instead of 0.13 s idle): a unit test checks
    # what `scaling` returns, not how fast this machine is.
    io = pools.scaling([1, 4], tasks=24, kind="io", delay=0.02)
    cpu = pools.scaling([1, 4], tasks=8, kind="cpu", delay=0.02)
    for runs, kind in ((io, "io"), (cpu, "cpu")):
        assert list(runs) == [1, 4]
        for workers, run in runs.items():
            assert (run.way, run.workers, run.kind) == ("pool", workers, kind)
            assert run.seconds > 0 and run.tasks_per_s == pytest.approx((24 if kind == "io" else 8) / run.seconds)
            assert math.isfinite(run.weight_error)
    assert all(run.weight_error < 0.1 for run in io.values())  # 24 results were enough to learn, as in 04
    for bad in ([], [0], [True], [1.5]):
        with pytest.raises(ValueError, match="workers"):
            pools.scaling(bad)


def test_default_chunksize_is_cpythons_rule(monkeypatch):
    assert pools.default_chunksize(20_000, 2) == 2500
    assert pools.default_chunksize(10, 2) == 2 and pools.default_chunksize(0, 2) == 0
    seen = []
    original = mp.pool.Pool._get_tasks

    def spy(func, it, size):
        seen.append(size)
        return original(func, it, size)

    monkeypatch.setattr(mp.pool.Pool, "_get_tasks", staticmethod(spy))
    with mp.get_context().Pool(3) as pool:
        pool.map(pools.tiny, range(1001))
    assert seen == [pools.default_chunksize(1001, 3)]
    with pytest.raises(ValueError, match="workers"):
        pools.default_chunksize(10, 0)
    with pytest.raises(TypeError, match="tasks"):
        pools.default_chunksize("10", 2)


def test_map_seconds_times_each_chunksize_on_one_pool():
    seconds, startup = pools.map_seconds(2000, 2, [1, None, 1000])
    assert set(seconds) == {1, None, 1000} and startup > 0
    assert seconds[1] > seconds[None]  # 2,000 round trips against 8
    for chunksizes, name in (([0], "chunksize"), ([], "chunksizes")):
        with pytest.raises(ValueError, match=name):
            pools.map_seconds(10, 2, chunksizes)
    with pytest.raises(ValueError, match="repeats"):
        pools.map_seconds(10, 2, [1], repeats=0)


@pytest.mark.parametrize("method", [m for m in ("fork", "spawn") if m in mp.get_all_start_methods()])
def test_every_task_argument_is_pickled_even_under_fork(method):
    counts = pools.pickles_per_task(tasks=6, workers=2, start_method=method)
    assert counts["one per task, as map arguments"] == 6
    assert counts["one for all, as initargs"] == (0 if method == "fork" else 2)


@pytest.mark.skipif(not HAS_FORK, reason="the demo carries a __main__ function into the watchdog by fork")
def test_a_main_module_function_hangs_a_spawn_pool(monkeypatch):
    main = sys.modules["__main__"]

    def only_in_this_process(x):
        return x

    only_in_this_process.__module__ = "__main__"
    only_in_this_process.__qualname__ = only_in_this_process.__name__ = "only_in_this_process"
    monkeypatch.setattr(main, "only_in_this_process", only_in_this_process, raising=False)
    # six spawn starts in a row (2 workers, 4 replacements): slow on a busy machine, hence the generous limit
    outcome = watchdog.run(
        pools.notebook_function_in_spawn_pool, only_in_this_process, 2.0, start_method="fork", timeout=90
    )
    assert outcome.status == "returned", outcome
    # each of the 4 tasks kills the worker that unpickles it; then the replacements live and the pool idles
    assert outcome.value == {
        "get(timeout=2) raised TimeoutError": True,
        "workers that died, for 4 tasks": 4,
        "replacements alive, idle, the result never comes": True,
    }
    assert "Can't get attribute 'only_in_this_process'" in outcome.stderr_error
    with pytest.raises(TypeError, match="fn"):
        pools.notebook_function_in_spawn_pool(3)


@pytest.mark.parametrize("method", [m for m in ("fork", "spawn") if m in mp.get_all_start_methods()])
def test_an_initializer_seeds_each_worker_reproducibly(method):
    seeded = pools.seeded_draws(True, start_method=method)
    assert seeded == {
        "every worker drew": True,
        "same first number in every worker: torch": False,
        "same first number in every worker: NumPy": False,
        "same first number in every worker: random": False,
        "torch draws follow the seed base_seed + worker number": True,
        "one torch thread per worker": True,
    }
    # fork copies this process's torch and NumPy generators into every worker, while Python's random
    # reseeds itself at fork; spawn seeds all three afresh
    assert pools.seeded_draws(False, start_method=method) == {
        "every worker drew": True,
        "same first number in every worker: torch": method == "fork",
        "same first number in every worker: NumPy": method == "fork",
        "same first number in every worker: random": False,
    }
    with pytest.raises(ValueError, match="workers"):
        pools.seeded_draws(True, workers=1)


def test_leaving_a_pool_block_terminates_pending_work():
    lost = pools.pending_after_exit(close_first=False)
    assert lost["result"].startswith("TimeoutError")
    assert pools.pending_after_exit(close_first=True)["result"] == 9


def test_maxtasksperchild_replaces_workers():

    pids = pools.worker_pids(tasks=6, maxtasksperchild=2)
    assert len(set(pids)) == 3 and os.getpid() not in pids
    assert len(set(pools.worker_pids(tasks=4, maxtasksperchild=None))) == 1
    with pytest.raises(ValueError, match="maxtasksperchild"):
        pools.worker_pids(maxtasksperchild=0)


def test_pool_workers_cannot_start_dataloader_workers():
    assert pools.loader_in_pool_worker(2) == "AssertionError: daemonic processes are not allowed to have children"
    assert pools.loader_in_pool_worker(0) == "returned 8"
    with pytest.raises(TypeError, match="num_workers"):
        pools.loader_in_pool_worker("2")


@pytest.mark.parametrize("method", [m for m in ("spawn", "forkserver") if m in mp.get_all_start_methods()])
def test_the_failed_loader_leaves_no_semaphore_in_dev_shm(method):
    """The failed DataLoader iterator made its queues (named semaphores under spawn and forkserver) before
    the assertion; the pool worker is then terminated, so only collecting them in the worker frees them."""
    before = watchdog.multiprocessing_names()
    assert "daemonic" in pools.loader_in_pool_worker(2, start_method=method)
    assert watchdog.multiprocessing_names() <= before


def test_simulated_makespan_shows_both_costs_of_a_chunksize():
    durations = pools.tail_heavy_durations()
    assert len(durations) == 4000 and durations[-1] == 0.02 and durations[0] == 0.00005
    ideal = sum(durations) / 4
    one = pools.simulate_makespan(durations, 4, 1, 0.0001)
    default = pools.simulate_makespan(durations, 4, pools.default_chunksize(4000, 4), 0.0001)
    ten = pools.simulate_makespan(durations, 4, 10, 0.0001)
    assert ideal < ten < one < default
    assert pools.simulate_makespan([1.0, 1.0], 2, 1, 0.0) == 1.0
    assert pools.simulate_makespan([1.0, 1.0], 2, 2, 0.5) == 2.5
    for args, name in (
        (([], 2, 1, 0.0), "durations"),
        (([1.0], 0, 1, 0.0), "workers"),
        (([1.0], 1, 0, 0.0), "chunksize"),
        (([1.0], 1, 1, -1.0), "overhead"),
    ):
        with pytest.raises(ValueError, match=name):
            pools.simulate_makespan(*args)
    with pytest.raises(ValueError, match="slow"):
        pools.tail_heavy_durations(tasks=10, slow=11)


def test_try_map_returns_results_or_the_parents_error():
    assert pools.try_map(pools.tiny, [1, 2]) == "returned [2, 3]"
    answer = pools.try_map(PLUS_ONE, [1])
    assert answer.startswith("PicklingError: Can't pickle <function <lambda> at 0x…>: attribute lookup <lambda>")
    with pytest.raises(TypeError, match="fn"):
        pools.try_map(None, [1])


def test_run_pipeline_hands_the_function_a_pool_and_a_bar():
    def pipeline(pool, items, bar):
        results = list(pool.imap(pools.delayed_square, items))
        bar.update(len(results))
        return results

    assert pools.run_pipeline(pipeline, [2, 0, 1], progress=False) == [4, 0, 1]
    with pytest.raises(TypeError, match="fn"):
        pools.run_pipeline("imap", [1])
    with pytest.raises(ValueError, match="workers"):
        pools.run_pipeline(pipeline, [1], workers=0)


def test_meet_breaks_the_barrier_instead_of_hanging_when_a_party_never_comes():
    import threading

    barrier = mp.get_context().Barrier(2)
    started = time.monotonic()
    with pytest.raises(threading.BrokenBarrierError):
        pools.meet(barrier, timeout=0.3)
    assert time.monotonic() - started < 5 and barrier.broken


def test_collect_and_train_trades_fork_for_spawn_where_fork_breaks_autograd(monkeypatch):
    """A CUDA build that sees a GPU (simulated): pool workers that run backward after this process did
    must not be forked (issue 31, point 3); the workers still learn."""
    seen = []
    real = pools.mp_context
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(pools, "mp_context", lambda method=None: seen.append(method) or real(method))
    run = pools.collect_and_train(1, tasks=4, delay=0.0, way="process", start_method="fork")
    assert seen and set(seen) - {"fork"} == {"spawn"} and not torch.isnan(run.combined).any()
    with pytest.raises(ValueError, match="start_method"):
        pools.collect_and_train(1, tasks=4, way="pool", start_method="thread")


# ---- the chapter's copyable script: examples/04_pool_and_executor.py --------------------------------

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "04_pool_and_executor.py"


def test_example_script_runs_alone_and_leaves_nothing_behind():
    done = example_runner.run(EXAMPLE.name, timeout=120)  # no pymp-* folder or process may be left behind
    expected = sum(x * x for x in range(100))
    assert f"Pool.imap, sum of squares: {expected}" in done.out
    assert f"ProcessPoolExecutor, sum of squares: {expected}" in done.out
    assert "100/100" in done.err  # the progress bar reached the end


def test_example_executor_resubmits_the_tasks_of_a_broken_pool(tmp_path):
    spec = importlib.util.spec_from_file_location("example_04", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    task = functools.partial(deaths.square_or_die_once, flag=str(tmp_path / "killed-once"))
    items = list(range(8))
    assert example.with_retries(task, items, workers=2) == [x * x for x in items]
    assert (tmp_path / "killed-once").exists()  # a worker really was killed on the way
    with pytest.raises(RuntimeError, match="tasks failed after 0 retries"):
        (tmp_path / "killed-once").unlink()
        example.with_retries(task, items, workers=2, retries=0)
