"""helpers.hogwild: runs report what the notebook says, and bad input is refused with a clear error."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
import torch
from example_runner import run_example

from helpers import hogwild, timing
from helpers.environment import pinnable_cores

HAS_FORK = "fork" in mp.get_all_start_methods()
SHORT = hogwild.Config(steps=1_500)


@pytest.fixture(scope="module")
def task() -> hogwild.Task:
    return hogwild.make_task()


def test_task_is_seeded_and_shaped():
    a, b = hogwild.make_task(n_train=100, n_test=10, seed=3), hogwild.make_task(n_train=100, n_test=10, seed=3)
    assert a.x_train.shape == (100, 20) and a.x_test.shape == (10, 20) and a.classes == 10
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_train, hogwild.make_task(n_train=100, n_test=10, seed=4).x_train)


def test_sparse_task_holds_feature_ids_and_two_classes():
    sparse = hogwild.make_sparse_task(n_train=500, n_test=50, features=100, active=3)
    assert sparse.sparse and sparse.classes == 2 and sparse.x_train.shape == (500, 3)
    assert int(sparse.x_train.max()) < 100 and set(sparse.y_train.tolist()) == {0, 1}


@pytest.mark.parametrize(
    "call",
    [
        lambda: hogwild.make_task(n_train=0),
        lambda: hogwild.make_task(classes=1),
        lambda: hogwild.make_sparse_task(features=3, active=4),
        lambda: hogwild.make_model(hidden=0),
        lambda: hogwild.make_sparse_model(features=-1),
        lambda: hogwild.Config(steps=0),
        lambda: hogwild.Config(lr=-0.1),
        lambda: hogwild.Config(momentum=True),
        lambda: hogwild.Config(threads=0),
        lambda: hogwild.compare([]),
        lambda: hogwild.compare([1, 0]),
    ],
)
def test_bad_arguments_raise_value_errors(call):
    with pytest.raises(ValueError):
        call()


def test_bad_types_raise_type_errors(task):
    with pytest.raises(TypeError, match="batch_size"):
        hogwild.Config(batch_size=2.5)
    with pytest.raises(TypeError, match="target_loss"):
        hogwild.Config(target_loss="low")
    with pytest.raises(TypeError, match="config"):
        hogwild.hogwild(1, config={"steps": 10}, task=task)
    with pytest.raises(TypeError, match="task"):
        hogwild.hogwild(1, task="digits")
    with pytest.raises(TypeError, match="model"):
        hogwild.hogwild(1, task=task, model=lambda x: x)
    with pytest.raises(TypeError, match="model"):
        hogwild.accuracy("model", task)
    with pytest.raises(TypeError, match="run"):
        hogwild.conflicts("run", dense=True)
    with pytest.raises(TypeError, match="optimizer"):
        hogwild.momentum_buffers([])


def test_bad_run_arguments_raise_value_errors(task):
    with pytest.raises(ValueError, match="processes"):
        hogwild.hogwild(0, task=task)
    with pytest.raises(ValueError, match="time_limit"):
        hogwild.hogwild(1, task=task, time_limit=0)
    with pytest.raises(ValueError, match="record_rows"):
        hogwild.hogwild(1, hogwild.Config(record_rows=True), task=task)


@pytest.mark.skipif(not HAS_FORK, reason="needs fork")
def test_fork_with_several_threads_is_refused(task):
    with pytest.raises(ValueError, match="OpenMP"):
        hogwild.hogwild(2, hogwild.Config(threads=2), task=task, start_method="fork")
    with pytest.raises(ValueError, match="OpenMP"):
        hogwild.hogwild(2, hogwild.Config(threads=None), task=task, start_method="fork")


def test_single_process_baseline_learns(task):
    run = hogwild.hogwild(1, SHORT, task=task)
    assert run.steps == [SHORT.steps] and run.accuracy > 85
    assert run.seconds > 0 and run.startup > 0 and run.samples_per_s > 0
    assert torch.isnan(run.losses).sum() == 0 and len(run.curve()) == SHORT.steps


def test_hogwild_shares_the_budget_and_matches_one_process(task):
    single = hogwild.hogwild(1, SHORT, task=task)
    run = hogwild.hogwild(2, SHORT, task=task)
    assert sum(run.steps) == SHORT.steps and min(run.steps) > 0
    assert all(p.is_shared() for p in run.model.parameters())
    assert abs(run.accuracy - single.accuracy) <= 2
    assert run.losses.shape == (2, SHORT.steps) and len(run.curve()) == SHORT.steps


@pytest.mark.skipif(not HAS_FORK, reason="needs fork")
def test_unshared_model_under_fork_stays_untrained(task):
    run = hogwild.hogwild(2, SHORT, task=task, model=hogwild.make_model(), share=False, start_method="fork")
    assert run.accuracy < 20
    assert not any(p.is_shared() for p in run.model.parameters())


def test_optimizer_from_the_parent_keeps_its_state_in_the_workers(task):
    model = hogwild.make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    run = hogwild.hogwild(2, SHORT, task=task, model=model, optimizer=optimizer)
    assert run.accuracy > 85
    assert hogwild.momentum_buffers(optimizer) == {"buffers": 0, "shared": False, "norm": 0.0}


def test_stop_signal_from_target_loss_and_from_time_limit(task):
    early = hogwild.hogwild(2, hogwild.Config(steps=8_000, target_loss=0.3), task=task)
    assert early.stopped_early and sum(early.steps) < 8_000
    timed = hogwild.hogwild(1, hogwild.Config(steps=200_000), task=task, time_limit=0.3)
    assert timed.stopped_early and 0 < sum(timed.steps) < 200_000
    finished = hogwild.hogwild(1, hogwild.Config(steps=50), task=task, time_limit=30)
    assert not finished.stopped_early and finished.steps == [50]


@pytest.mark.skipif(not HAS_FORK, reason="the failure is injected into forked children")
def test_a_worker_dying_before_the_barrier_fails_fast(task, monkeypatch):
    def broken(threads: int) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(hogwild.torch, "set_num_threads", broken)
    with pytest.raises(RuntimeError, match="start barrier"):
        hogwild.hogwild(2, SHORT, task=task, start_method="fork", timeout=30)


def test_a_worker_failing_after_the_barrier_is_reported(task):
    wrong = torch.nn.Linear(20, 3)  # 3 outputs for 10 classes: cross_entropy fails on labels >= 3
    with pytest.raises(RuntimeError, match="exit codes"):
        hogwild.hogwild(1, SHORT, task=task, model=wrong, timeout=30)


def test_conflicts_sparse_fewer_than_dense():
    sparse_task = hogwild.make_sparse_task()
    config = hogwild.Config(steps=1_500, batch_size=1, lr=0.1, record_rows=True)
    sparse = hogwild.hogwild(2, config, task=sparse_task, model=hogwild.make_sparse_model(sparse=True))
    dense = hogwild.hogwild(2, config, task=sparse_task, model=hogwild.make_sparse_model(sparse=False))
    s, d = hogwild.conflicts(sparse, dense=False), hogwild.conflicts(dense, dense=True)
    assert s["steps"] == d["steps"] == 1_500
    assert d["conflicting"] == d["overlapping"] > 0.5
    assert s["conflicting"] < d["conflicting"]
    with pytest.raises(ValueError, match="record"):
        hogwild.conflicts(hogwild.hogwild(1, hogwild.Config(steps=10), task=hogwild.make_task()), dense=False)


def test_compare_runs_each_count_on_the_same_budget(task):
    runs = hogwild.compare([1, 2], hogwild.Config(steps=600), task=task)
    assert list(runs) == [1, 2] and all(sum(r.steps) == 600 for r in runs.values())


def test_a_run_that_outlasts_its_timeout_raises_timeout_error(task):
    with pytest.raises(TimeoutError):  # still running, or (on a very busy machine) not yet at the barrier
        hogwild.hogwild(1, hogwild.Config(steps=2_000_000), task=task, timeout=1)


def test_timeouts_scale_with_the_load():
    from helpers.environment import usable_cores

    assert hogwild.scaled_wait(0) >= 60
    assert hogwild.scaled_wait(4 * usable_cores()) >= 4 * 60


def test_in_this_process_restores_threads_and_random_state(task):
    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    run = hogwild.in_this_process(hogwild.Config(steps=300, threads=1), task=task)
    assert run.steps == [300] and run.startup == 0 and run.samples_per_s > 0
    assert torch.get_num_threads() == threads and torch.equal(torch.random.get_rng_state(), state)
    limited = hogwild.in_this_process(hogwild.Config(steps=10_000_000, threads=1), task=task, time_limit=0.5)
    assert limited.stopped_early and 0 < limited.steps[0] < 10_000_000
    with pytest.raises(ValueError, match="time_limit"):
        hogwild.in_this_process(time_limit=0)


def test_speed_table_interleaves_rounds_and_reports_spreads(task):
    speeds = hogwild.speed_table([1, 2], hogwild.Config(steps=300), task=task, rounds=2, threads=2)
    assert speeds.rounds == 2 and [len(rs) for rs in speeds.runs.values()] == [2, 2] and len(speeds.threaded) == 2
    for spread in (speeds.speedup(2), speeds.threaded_speedup(), speeds.versus_threaded(2)):
        assert spread.n == 2 and 0 < spread.low <= spread.median <= spread.high
    assert speeds.load is not None and speeds.load.cores >= 1
    with pytest.raises(ValueError, match="includes 1"):
        hogwild.speed_table([2, 4], task=task)
    with pytest.raises(ValueError, match="threads"):
        hogwild.speed_table([1], hogwild.Config(threads=2), task=task)


needs_pinning = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning to a core needs Linux")


@needs_pinning
def test_speed_table_can_take_the_baseline_on_the_fastest_core(task):
    speeds = hogwild.speed_table(
        [1, 2], hogwild.Config(steps=300), task=task, rounds=2, threads=2, baseline_on_each_core=True
    )
    cores = sorted(os.sched_getaffinity(0))
    assert sorted(speeds.by_core) == cores and all(len(runs) == 2 for runs in speeds.by_core.values())
    for i, kept in enumerate(speeds.runs[1]):
        fastest = max((speeds.by_core[core][i] for core in cores), key=lambda r: r.samples_per_s)
        assert kept is fastest
    assert speeds.speedup(2).n == 2
    assert hogwild.speed_table([1], hogwild.Config(steps=50), task=task, rounds=1, threads=1).by_core == {}
    with pytest.raises(TypeError, match="baseline_on_each_core must be True or False"):
        hogwild.speed_table([1], task=task, baseline_on_each_core="yes")


@needs_pinning
@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the probe rides on fork")
def test_a_pinned_run_runs_on_its_core(task, tmp_path, monkeypatch):
    seen = tmp_path / "affinity"
    real = os.sched_setaffinity

    def recording(pid: int, mask: set[int]) -> None:  # inherited by the forked worker
        real(pid, mask)
        with open(seen, "a") as f:
            f.write(f"{sorted(os.sched_getaffinity(0))}\n")

    monkeypatch.setattr(hogwild.os, "sched_setaffinity", recording)
    before = os.sched_getaffinity(0)
    core = max(before)
    hogwild.hogwild(1, hogwild.Config(steps=20, core=core), task=task, start_method="fork")
    assert seen.read_text() == f"[{core}]\n"  # the worker pinned itself, once, to that core alone
    assert os.sched_getaffinity(0) == before  # and the parent was not pinned


def test_config_core_names_what_it_expects():
    with pytest.raises(TypeError, match="core must be an int"):
        hogwild.Config(core="0")
    with pytest.raises(ValueError, match="core must be >= 0"):
        hogwild.Config(core=-1)
    cores = pinnable_cores()
    if cores is not None:  # without pinning (macOS, Windows): the next test
        with pytest.raises(ValueError, match="core must be one of this process's cores"):
            hogwild.Config(core=max(cores) + 1)


def test_without_pinning_the_pinned_options_say_so_and_the_probe_reads_none(monkeypatch):
    # as on macOS and Windows, where os.sched_setaffinity does not exist
    monkeypatch.setattr(hogwild, "pinnable_cores", lambda: None)
    monkeypatch.setattr(timing, "pinnable_cores", lambda: None)
    with pytest.raises(ValueError, match="core needs os.sched_setaffinity"):
        hogwild.Config(core=0)
    with pytest.raises(ValueError, match="baseline_on_each_core needs os.sched_setaffinity"):
        hogwild.speed_table([1], task=hogwild.make_task(), baseline_on_each_core=True)
    assert timing.core_speeds(count=1_000, trials=1) is None


def test_fork_breaks_autograd_only_where_torch_sees_a_device():
    assert hogwild.fork_breaks_autograd(0) is False and hogwild.fork_breaks_autograd(1) is True
    seen = torch.cuda.device_count() + int(torch.backends.mps.is_available())
    assert hogwild.fork_breaks_autograd() is (seen > 0)  # False on the CPU build for Linux
    for bad in (-1, True, "1", 1.0):
        with pytest.raises(ValueError, match="devices"):
            hogwild.fork_breaks_autograd(bad)


def test_children_start_method_trades_fork_for_spawn_only_where_fork_breaks_autograd():
    assert hogwild.children_start_method("fork", devices=0) == "fork"
    assert hogwild.children_start_method("fork", devices=2) == "spawn"
    assert hogwild.children_start_method("spawn", devices=2) == "spawn"
    assert hogwild.children_start_method("forkserver", devices=2) == "forkserver"
    assert hogwild.children_start_method(None, devices=0) == hogwild.default_start_method()
    with pytest.raises(ValueError, match="prefer"):
        hogwild.children_start_method("thread")


def test_hogwild_on_a_machine_with_a_gpu_refuses_fork_and_defaults_to_spawn(task, monkeypatch):
    """A CUDA build that sees a GPU (simulated): an explicit fork is refused before any process starts,
    the default start method becomes spawn (issue 31, point 3)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="sees a GPU"):
        hogwild.hogwild(2, SHORT, task=task, start_method="fork")
    run = hogwild.hogwild(1, hogwild.Config(steps=20), task=task)
    assert run.start_method == ("spawn" if hogwild.default_start_method() == "fork" else hogwild.default_start_method())


def _run_at(samples_per_s: float) -> hogwild.Run:
    """A Run whose only property of interest is its speed: 1,000 samples in 1000 / samples_per_s s."""
    return hogwild.Run(
        processes=1, losses=torch.zeros(1, 1), steps=[1_000], spans=torch.zeros(1, 1, 2), rows=None, startup=0.0,
        seconds=1_000 / samples_per_s, accuracy=90.0, model=torch.nn.Linear(1, 1), stopped_early=False,
        batch_size=1, start_method="fork",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("one", "two", "threaded", "headline"),
    [
        (100, 190, 95, "Hogwild (2 x 1 thread) wins here"),
        (100, 77, 60, "1 process x 1 thread wins here"),  # issue 37: Hogwild at 0.77x must not be named the winner
        (100, 120, 180, "1 process x 2 threads wins here"),
        (100, 105, 60, "no clear winner: Hogwild (2 x 1 thread) and 1 process x 1 thread"),
    ],
)
def test_the_headline_names_the_fastest_of_the_three_ways(one, two, threaded, headline):
    speeds = hogwild.Speeds(
        runs={1: [_run_at(one)] * 3, 2: [_run_at(two)] * 3}, threaded=[_run_at(threaded)] * 3, threads=2
    )
    assert speeds.fastest(2).startswith(headline), speeds.fastest(2)
    with pytest.raises(ValueError, match="processes must be one of the measured counts"):
        speeds.fastest(4)


def test_every_process_of_a_run_is_timed_from_one_origin(task):
    run = hogwild.hogwild(2, hogwild.Config(steps=200), task=task)
    done = ~torch.isnan(run.spans[..., 0])
    assert float(run.spans[..., 0][done].min()) == 0.0  # the run's first step starts at 0
    assert run.seconds == pytest.approx(float(run.spans[..., 1][done].max()))
    for r in range(2):  # each process's steps follow each other on the common clock
        starts = run.spans[r, : run.steps[r], 0]
        assert bool((starts[1:] >= starts[:-1]).all())


def test_example_script_trains_the_shared_model_and_leaves_nothing_behind():
    out = run_example("03_hogwild.py")
    line = out.strip().splitlines()[-1]
    assert line.startswith("2 processes x 1000 steps, training accuracy:"), out
    assert float(line.split(":")[1].strip(" %")) > 80  # the parent's model learned from both processes
