import multiprocessing as mp

import pytest
from example_runner import run_example

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
    assert result.serial == pytest.approx(2 * result.one_worker)
    assert result.processes_speedup == pytest.approx(result.serial / result.processes)
    assert result.threads_speedup == pytest.approx(result.serial / result.threads)
    assert result.ratio == pytest.approx(result.processes_speedup / result.threads_speedup)
    assert result.start_method in mp.get_all_start_methods()


def test_busy_and_report_waits_at_the_barrier_then_reports():
    import queue
    import threading

    barrier, results = threading.Barrier(2), queue.Queue()
    worker = threading.Thread(target=orientation.busy_and_report, args=(barrier, 1000, results))
    worker.start()
    assert results.empty()  # still waiting for the second party
    barrier.wait(timeout=10)
    assert results.get(timeout=10) == orientation.busy(1000)
    worker.join(timeout=10)


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
    cost = orientation.start_cost(["fork"], repeats=2)
    assert list(cost) == ["fork"]
    assert cost["fork"].n == 2 and 0 < cost["fork"].low <= cost["fork"].median <= cost["fork"].high


@pytest.mark.parametrize(
    "kwargs, error",
    [({"methods": ["thread"]}, ValueError), ({"repeats": 0}, ValueError), ({"repeats": 1.0}, TypeError)],
)
def test_start_cost_bad_arguments(kwargs, error):
    with pytest.raises(error):
        orientation.start_cost(**kwargs)


def test_oversubscription_small_run():
    times = orientation.oversubscription([(1, 1), (2, 1)], matmuls=4, rounds=2)
    assert set(times) == {(1, 1), (2, 1)} and all(t.n == 2 and t.low > 0 for t in times.values())


def test_oversubscription_wait_policy_reaches_the_workers_only(monkeypatch):
    import os

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    seen = []

    def fake_start(self):  # records the environment a spawned child would copy at start-up
        seen.append(os.environ.get("OMP_WAIT_POLICY"))
        raise RuntimeError("not started")

    monkeypatch.setattr(mp.get_context("spawn").Process, "start", fake_start)
    with pytest.raises(RuntimeError, match="not started"):
        orientation.oversubscription([(1, 1)], matmuls=4, wait_policy="PASSIVE")
    assert seen == ["PASSIVE"] and "OMP_WAIT_POLICY" not in os.environ


def test_oversubscription_bad_rounds_and_policy():
    with pytest.raises(ValueError, match="rounds"):
        orientation.oversubscription([(1, 1)], rounds=0)
    with pytest.raises(ValueError, match="wait_policy"):
        orientation.oversubscription([(1, 1)], wait_policy="passive")


@pytest.mark.parametrize("configs", [[(0, 1)], [(1,)], [(1, 1.5)], [(True, 1)]])
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


def test_example_script_runs_and_cleans_up():
    out = run_example("00_start_methods.py")
    lines = out.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith(f"task {i}: ") for i, line in enumerate(lines)), out
