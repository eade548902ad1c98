"""helpers.sharing: each demo reports what the notebook says, and bad input is refused."""

from __future__ import annotations

import multiprocessing as mp
import os

import numpy as np
import pytest
import torch
from example_runner import run_example

from helpers import sharing, watchdog

HAS_FORK = "fork" in mp.get_all_start_methods()


def test_crossing_shares_tensors_and_copies_numpy():
    tensor = sharing.crossing("tensor")
    assert tensor["shared before sending"] is False and tensor["shared after sending"] is True
    assert tensor["parent sees the child's write"] is True
    assert sharing.crossing("numpy")["parent sees the child's write"] is False
    with pytest.raises(ValueError, match="kind"):
        sharing.crossing("list")


def test_handoff_table_measures_three_ways():
    (row,) = sharing.handoff_table([2**16], repeats=1)
    assert row.nbytes == 2**16
    assert min(row.pickled_numpy, row.tensor_not_shared, row.tensor_shared) > 0
    for kwargs in ({"mode": "read"}, {"repeats": 0}):
        with pytest.raises(ValueError):
            sharing.handoff_table([1024], **kwargs)
    with pytest.raises(ValueError, match="nbytes"):
        sharing.handoff_seconds(2)


@pytest.mark.skipif(not HAS_FORK, reason="fork inheritance")
def test_grads_cross_by_inheritance_only():
    forked = sharing.grad_after_crossing("fork")
    assert forked["tensor with a grad arrives with grad None"]
    assert forked["child's parameter update seen by the parent"]
    assert forked["child's grad update seen by the parent"]


def test_growing_a_shared_tensor_kills_the_process():
    outcome = watchdog.run(sharing.grow_shared, timeout=30)
    assert outcome.status == "died" and outcome.signal == "SIGSEGV"


def test_fd_exhaustion_and_its_fixes():
    assert "ancdata" in watchdog.run(sharing.hold_many_tensors, timeout=30).error
    assert watchdog.run(sharing.hold_many_tensors, keep="clone", timeout=30).value == "kept 200 tensors"
    assert watchdog.run(sharing.hold_many_tensors, strategy="file_system", timeout=30).value == "kept 200 tensors"
    assert not [f for f in os.listdir("/dev/shm") if f.startswith("torch_")] if os.path.isdir("/dev/shm") else True


def test_remove_segments_of_takes_only_the_dead_process_s_names(tmp_path):
    # A producer killed between creating a segment and unlinking its name leaves torch_<pid>_* behind.
    for name in ("torch_4242_123_0", "torch_4242_9_17", "torch_42420_1_0", "torch_424_1_0", "sem.mp-x"):
        (tmp_path / name).write_bytes(b"")
    assert sorted(sharing.remove_segments_of(4242, folder=str(tmp_path))) == ["torch_4242_123_0", "torch_4242_9_17"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sem.mp-x", "torch_42420_1_0", "torch_424_1_0"]
    assert sharing.remove_segments_of(4242, folder=str(tmp_path / "none")) == []
    for bad in (None, 0, -1, True, "4242"):
        with pytest.raises(ValueError, match="pid must be a positive process id"):
            sharing.remove_segments_of(bad)


@pytest.mark.parametrize(
    "kwargs, error", [({"count": 0}, ValueError), ({"headroom": 4}, ValueError), ({"keep": "all"}, ValueError)]
)
def test_hold_many_tensors_bad_arguments(kwargs, error):
    with pytest.raises(error):
        sharing.hold_many_tensors(**kwargs)


def test_dataloader_wraps_fd_exhaustion():
    outcome = watchdog.run(sharing.dataloader_keeping_batches, timeout=60)
    assert outcome.error.startswith("RuntimeError: Too many open files.")


def test_strategy_reaches_fork_workers_not_spawn_workers_unless_worker_init_fn_sets_it():
    """The workers send the batches; a spawn worker starts with the default (issue 31, point 12)."""
    outcome = watchdog.run(sharing.strategy_in_loader_workers, timeout=60)
    expected = {
        "this process": "file_system",
        "spawn worker": "file_descriptor",
        "spawn worker, worker_init_fn=set_file_system": "file_system",
    }
    if "fork" in mp.get_all_start_methods():
        expected["fork worker"] = "file_system"
    assert outcome.value == expected
    assert torch.multiprocessing.get_sharing_strategy() == "file_descriptor"  # ran in the child only
    with pytest.raises(ValueError, match="start_methods"):
        sharing.strategy_in_loader_workers(start_methods=("thread",))


def test_a_plain_multiprocessing_queue_shares_tensors_too():
    """`import torch` registers its reducers on the standard library's ForkingPickler (issue 31, point 9)."""
    report = sharing.crossing("tensor", via="multiprocessing")
    assert report["shared after sending"] is True and report["parent sees the child's write"] is True
    outcome = watchdog.run(sharing.hold_many_tensors, plain=True, timeout=30)
    assert outcome.error.startswith("RuntimeError: received 0 items of ancdata")
    with pytest.raises(ValueError, match="via"):
        sharing.crossing("tensor", via="pickle")
    with pytest.raises(TypeError, match="plain"):
        sharing.hold_many_tensors(plain="yes")


def test_producer_must_outlive_the_handoff():
    assert sharing.early_exit_producer(False).startswith("OSError: the sender has exited")
    assert sharing.early_exit_producer(True) == "received [0.0, 1.0, 2.0, 3.0]"


def test_buffer_reuse_measures_both():
    assert sharing.buffer_reuse(False, count=10, shape=(64,)) > 0
    assert sharing.buffer_reuse(True, count=10, shape=(64,)) > 0
    with pytest.raises(ValueError):
        sharing.buffer_reuse(True, count=0)


def test_simple_queue_shares_before_put_returns():
    assert sharing.is_shared_after_put("SimpleQueue", trials=5) == 5
    assert 0 <= sharing.is_shared_after_put("Queue", trials=5) <= 5
    with pytest.raises(ValueError, match="queue_kind"):
        sharing.is_shared_after_put("Pipe")


def test_join_before_drain():
    assert watchdog.run(sharing.join_before_drain, "numpy", timeout=2).status == "hung"
    assert watchdog.run(sharing.join_before_drain, "numpy", drain_first=True, timeout=30).value.startswith("got")
    with pytest.raises(ValueError, match="kind"):
        sharing.join_before_drain("list")


def test_value_needs_its_lock():
    assert sharing.count_with_value(True, workers=2, times=2_000) == 4_000
    assert sharing.count_with_value(False, workers=2, times=10) <= 20
    # the notebook's numbers: started on a barrier, 4 x 50,000 unlocked increments always lose some
    assert all(sharing.count_with_value(False) < 200_000 for _ in range(3))
    with pytest.raises(ValueError):
        sharing.count_with_value(True, workers=0)


def test_shared_loss_log_is_complete_and_reproducible():
    log = sharing.shared_loss_log(workers=2, steps=5)
    assert log.shape == (2, 5) and not torch.isnan(log).any()
    assert torch.equal(log, sharing.shared_loss_log(workers=2, steps=5))
    with pytest.raises(ValueError):
        sharing.shared_loss_log(steps=0)


@pytest.mark.skipif(not HAS_FORK, reason="learner functions reach children by fork")
def test_collect_and_count_with_functions():
    def good(queue, process):
        item = queue.get(timeout=10)
        process.join(10)
        return item

    assert watchdog.run(sharing.collect_from_producer, good, start_method="fork", timeout=30).value == (
        "got the array and joined the producer"
    )

    def locked(counter):
        with counter.get_lock():
            counter.value += 1

    assert sharing.count_with_function(locked, workers=2, times=1_000) == 2_000
    with pytest.raises(TypeError):
        sharing.collect_from_producer(None)
    with pytest.raises(TypeError):
        sharing.count_with_function(3)


def test_pickled_size_and_fd_count():
    assert sharing.pickled_size(np.zeros(1000)) > 8000
    assert sharing.fd_count() > 0


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")
@pytest.mark.parametrize("crash", [False, True])
def test_file_system_segments_are_removed(crash):
    assert sharing.file_system_lifecycle(crash) == {
        "a torch_* file in /dev/shm while the child lives": True,
        "torch_shm_manager leads its own session (setsid)": True,
        "gone after it ended": True,
    }


def test_fill_array_one_slot_per_process():
    assert sharing.fill_array(workers=3) == [0.0, 10.0, 20.0]
    with pytest.raises(ValueError, match="workers"):
        sharing.fill_array(workers=0)


def test_shared_loss_log_children_are_not_forked_where_fork_breaks_autograd(monkeypatch):
    """Its children run backward, after grad_after_crossing ran one here (issue 31, point 3)."""
    seen = []
    real = sharing._ctx
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(sharing, "_ctx", lambda method=None: seen.append(method) or real(method))
    from helpers.environment import default_start_method

    log = sharing.shared_loss_log(workers=1, steps=2)
    default = default_start_method()
    assert not torch.isnan(log).any() and seen == ["spawn" if default == "fork" else default]


def test_example_script_runs_and_cleans_up():
    out = run_example("02_shared_tensors.py")
    assert out.splitlines() == [
        "received: 100 tensors; producer counted 100 ; exit code 0",
        "values intact: True",
        "kept copies are private (not shared): True",
    ], out
