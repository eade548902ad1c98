import multiprocessing as mp

import pytest

from helpers import orientation


def test_busy_is_deterministic_and_validates():
    assert orientation.busy(10) == sum(i * i % 7 for i in range(10))
    assert orientation.busy(0) == 0
    with pytest.raises(TypeError, match="n must be an int"):
        orientation.busy(1.5)
    with pytest.raises(ValueError, match="n must be >= 0"):
        orientation.busy(-1)


def test_threads_vs_processes_measures_all_three():
    result = orientation.threads_vs_processes(n=20_000, workers=2)
    assert result.workers == 2
    assert min(result.one_worker, result.threads, result.processes) > 0
    assert result.ratio == pytest.approx(result.threads / result.processes)
    assert result.start_method in mp.get_all_start_methods()


@pytest.mark.parametrize(
    "kwargs, error",
    [({"workers": 0}, ValueError), ({"workers": True}, TypeError), ({"n": 0}, ValueError), ({"n": "5"}, TypeError)],
)
def test_threads_vs_processes_bad_arguments(kwargs, error):
    with pytest.raises(error):
        orientation.threads_vs_processes(**kwargs)


def test_start_cost_fork_only():
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork here")
    cost = orientation.start_cost(["fork"], repeats=1)
    assert list(cost) == ["fork"] and cost["fork"] > 0


@pytest.mark.parametrize(
    "kwargs, error",
    [({"methods": ["thread"]}, ValueError), ({"repeats": 0}, ValueError), ({"repeats": 1.0}, TypeError)],
)
def test_start_cost_bad_arguments(kwargs, error):
    with pytest.raises(error):
        orientation.start_cost(**kwargs)


def test_oversubscription_small_run():
    times = orientation.oversubscription([(1, 1), (2, 1)], matmuls=4)
    assert set(times) == {(1, 1), (2, 1)} and all(t > 0 for t in times.values())


@pytest.mark.parametrize("configs", [[(0, 1)], [(1,)], [(1, 1.5)]])
def test_oversubscription_bad_configs(configs):
    with pytest.raises(ValueError, match="configs"):
        orientation.oversubscription(configs)


def test_oversubscription_bad_matmuls():
    with pytest.raises(ValueError, match="matmuls"):
        orientation.oversubscription([(1, 1)], matmuls=0)
    with pytest.raises(TypeError, match="matmuls"):
        orientation.oversubscription([(1, 1)], matmuls=2.5)


def test_call_in_spawned_child():
    assert orientation.call_in_spawned_child(orientation.square, 7) == 49


def test_call_in_spawned_child_reports_a_child_that_sends_nothing():
    import os

    with pytest.raises(ChildProcessError, match="exited with code 3 and sent no result"):
        orientation.call_in_spawned_child(os._exit, 3, timeout=20)


def test_parallel_sum_and_acquire():
    import torch

    threads = torch.get_num_threads()
    try:
        assert orientation.parallel_sum(1) == 4_000_000.0
    finally:
        torch.set_num_threads(threads)  # parallel_sum sets it process-wide; later tests need the pool
    with pytest.raises(ValueError, match="threads"):
        orientation.parallel_sum(0)
    import threading

    assert orientation.acquire(threading.Lock()) == "acquired"


def test_read_counter_and_thread_count():
    assert orientation.read_counter() == orientation.COUNTER
    assert orientation.thread_count() >= 1


def test_fork_while_a_thread_holds_a_lock_hangs_and_cleans_up():
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork here")
    outcome = orientation.fork_while_a_thread_holds_a_lock(timeout=1.0)
    assert outcome.status == "hung" and outcome.stuck_in == ["acquire"]
