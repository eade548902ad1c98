"""helpers.pitfalls: each wrong/right pair behaves as notebook 06 says, and bad arguments are refused with
a clear error (its checkers: tests/test_checkers_pitfalls.py). The slow hang demos run once each, with
short watchdog limits."""

from __future__ import annotations

import multiprocessing as mp
import os

import example_runner
import pytest

from helpers import pitfalls, watchdog

HAS_FORK = "fork" in mp.get_all_start_methods()
needs_fork = pytest.mark.skipif(not HAS_FORK, reason="needs the fork start method")


@needs_fork
def test_fork_after_lock_hangs_only_when_held():
    assert pitfalls.fork_after_lock(False).status == "returned"
    hung = pitfalls.fork_after_lock(True, timeout=1.0)
    assert hung.status == "hung" and hung.stuck_in[-1] == "_acquire"


@needs_fork
def test_join_before_get_hangs_and_get_first_returns():
    assert watchdog.run(pitfalls.join_then_get, True, start_method="fork", timeout=20).value == 8_000_000
    hung = watchdog.run(pitfalls.join_then_get, False, start_method="fork", timeout=1.5)
    assert hung.status == "hung" and hung.stuck_in == ["BaseProcess.join", "join_then_get"]


def test_consume_reports_a_dead_producer_and_reads_a_live_one():
    assert pitfalls.consume(fail=True, safe=True, timeout=0.2) == [0, "producer failed: ValueError: bad record 1"]
    assert pitfalls.consume(fail=False, safe=True, timeout=0.2) == [0, 1, 2]
    assert pitfalls.consume(fail=False, safe=False) == [0, 1, 2]


def test_run_python_returns_cleaned_lines():
    assert pitfalls.run_python(pitfalls.START_METHOD_TWICE) == ["RuntimeError: context has already been set"]
    assert pitfalls.run_python("print('/some/where/deep/file.py')") == ["…/file.py"]


@needs_fork
def test_process_group_pitfalls():
    taken = watchdog.run(pitfalls.port_taken, timeout=30, start_method="fork").value
    assert taken.startswith("DistNetworkError") and "EADDRINUSE" in taken and "port: N" in taken
    assert watchdog.run(pitfalls.port_from_os, timeout=30, start_method="fork").value.endswith("1.0")
    left = watchdog.run(pitfalls.interrupted_cell, False, timeout=30, start_method="fork").value
    assert "initialize the default process group twice" in left[1]
    fixed = watchdog.run(pitfalls.interrupted_cell, True, timeout=30, start_method="fork").value
    assert all(line.endswith("a group is left: False") for line in fixed)


def _store_listens_where() -> list[str]:
    import psutil

    store = pitfalls.loopback_store(timeout=5)
    try:
        return sorted(
            c.laddr.ip
            for c in psutil.Process().net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == store.port
        )
    finally:
        del store


@needs_fork
def test_loopback_store_listens_on_127_0_0_1_only():
    assert watchdog.run(_store_listens_where, timeout=30, start_method="fork").value == ["127.0.0.1"]


def test_recorded_shm_line_has_the_shape_the_notebook_prints():
    result = pitfalls.RECORDED_SHM["batch 20 (80 MB), file_descriptor"]["result"]
    assert "No space left on device (28)" in result and pitfalls.RECORDED_SHM["shm_mb"] == 64


def test_stack_names_reads_the_main_thread_from_start_inward():
    trace = (
        "Thread 0x00007f (most recent call first):\n"
        '  File "/x/queues.py", line 103 in get\n'
        '  File "/x/pitfalls.py", line 9 in consume\n'
        '  File "/x/pitfalls.py", line 3 in stuck\n'
        '  File "/x/process.py", line 1 in run\n'
        "\nThread 0x00007e (most recent call first):\n"
        '  File "/x/threading.py", line 1 in wait\n'
    )
    assert pitfalls.stack_names(trace, "stuck") == ["stuck", "consume", "get"]
    assert pitfalls.stack_names(trace, "absent") == ["run", "stuck", "consume", "get"]


def test_dataloader_helpers():
    assert pitfalls.dataloader_timeout(0, delay=0.1) == "items [0, 1, 2, 3]"
    assert pitfalls.dataloader_timeout(0.3, delay=1.0).endswith("DataLoader timed out after 0.3 seconds")
    assert pitfalls.worker_error(0) == {"error": "KeyError: 3", "innermost frame": "__getitem__"}
    with_workers = pitfalls.worker_error(1)
    assert with_workers["error"].startswith("KeyError: Caught KeyError in DataLoader worker process 0")


def test_move_to_reports_the_device_or_the_error():
    import torch

    assert pitfalls.move_to(torch.device("cpu")) == "on cpu" and pitfalls.move_to("cpu") == "on cpu"
    if torch.accelerator.current_accelerator() is None:
        assert pitfalls.move_to(0) == "RuntimeError: Cannot access accelerator device when none is available."


def test_tutorial_pairs():
    result = pitfalls.softmax_into_cross_entropy(steps=100)
    assert result["logits: loss"] < result["softmax: loss"]
    assert result["logits: accuracy %"] > result["softmax: accuracy %"] + 5
    wrong, right = pitfalls.epoch_draws(True), pitfalls.epoch_draws(False)
    assert wrong[0] == wrong[1] and right[0] != right[1]
    assert "takes 1 positional argument but 2 were given" in pitfalls.spawn_arguments(pitfalls.takes_only_a)
    assert pitfalls.spawn_arguments(pitfalls.takes_rank_and_a) == "results by rank: [30, 31]"
    seen = "parent's optimizer sees the workers' momentum"
    for build_in, shared in (("parent", False), ("worker", False), ("shared", True)):
        state = pitfalls.optimizer_in_workers(build_in)
        assert state["workers finished"] and state["shared weights changed"] and state[seen] is shared, build_in


@needs_fork
def test_spawn_arguments_leaves_no_error_file():
    import tempfile
    from pathlib import Path

    before = set(Path(tempfile.gettempdir()).glob("pytorch-errorfile-*"))
    assert "TypeError" in pitfalls.spawn_arguments(pitfalls.takes_only_a)
    assert set(Path(tempfile.gettempdir()).glob("pytorch-errorfile-*")) <= before


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: pitfalls.fork_after_lock("yes"), TypeError),
        (lambda: pitfalls.join_then_get(1), TypeError),
        (lambda: pitfalls.join_then_get(True, nbytes=0), ValueError),
        (lambda: pitfalls.consume(True, "no"), TypeError),
        (lambda: pitfalls.consume(True, True, timeout=-1), ValueError),
        (lambda: pitfalls.run_python(""), TypeError),
        (lambda: pitfalls.interrupted_cell(1), TypeError),
        (lambda: pitfalls.loopback_store(timeout=-1), ValueError),
        (lambda: pitfalls.shm_exhaustion(timeout=-1), ValueError),
        (lambda: pitfalls.stack_names(None, "x"), TypeError),
        (lambda: pitfalls.dataloader_timeout(-1), ValueError),
        (lambda: pitfalls.worker_error(-1), ValueError),
        (lambda: pitfalls.optimizer_in_workers("both"), ValueError),
        (lambda: pitfalls.ddp_on_cpu(0), TypeError),
        (lambda: pitfalls.move_to(True), TypeError),
        (lambda: pitfalls.move_to(1.5), TypeError),
        (lambda: pitfalls.softmax_into_cross_entropy(steps=0), ValueError),
        (lambda: pitfalls.spawn_arguments(pitfalls.takes_rank_and_a, nprocs=0), ValueError),
        (lambda: pitfalls.workers_by_reflex(ranks=0), ValueError),
        (lambda: pitfalls.epoch_draws(True, epochs=0), ValueError),
        (lambda: pitfalls.write_script("nope", "."), ValueError),
        (lambda: pitfalls.write_script("mystery", "/no/such/folder"), ValueError),
        (lambda: pitfalls.safe_get_trial(3, "crash"), TypeError),
        (lambda: pitfalls.safe_get_trial(len, True), ValueError),
        (lambda: pitfalls.py_spy_dump(".", wait=-1), ValueError),
    ],
)
def test_bad_arguments_are_refused(call, error):
    with pytest.raises(error):
        call()


def test_pool_without_guard_hangs_and_leaves_no_semaphore_files(tmp_path):
    from helpers import watchdog

    before = watchdog.multiprocessing_names()
    outcome = watchdog.run_script(pitfalls.write_script("pool_no_guard", tmp_path), timeout=2)
    assert outcome.status == "hung" and "bootstrapping phase" in outcome.stderr_error
    assert watchdog.multiprocessing_names() <= before


def test_an_empty_compile_cache_folder_made_by_a_demo_is_removed(tmp_path, monkeypatch):
    """optimizer.step() and DDP import torch._dynamo, which makes torchinductor_<user> in the temporary
    folder: a demo removes it when it made it and it stayed empty, and leaves anything else alone."""
    cache = tmp_path / "torchinductor_test"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    with pitfalls._no_empty_inductor_cache_left():
        cache.mkdir()
    assert not cache.exists()
    with pitfalls._no_empty_inductor_cache_left():
        cache.mkdir()
        (cache / "kept").write_text("a real cache entry")
    assert (cache / "kept").exists()
    (cache / "kept").unlink()
    with pitfalls._no_empty_inductor_cache_left():  # existed before: left alone
        pass
    assert cache.exists()


# ---- thread pools and fork: tokenizers, autograd ---------------------------------------------------


def test_tokenizer_and_its_probe_refuse_bad_arguments():
    with pytest.raises(TypeError, match="sentences"):
        pitfalls.tiny_tokenizer(())
    with pytest.raises(TypeError, match="sentences"):
        pitfalls.tiny_tokenizer(["a list"])
    with pytest.raises(TypeError, match="parallelism"):
        pitfalls.tokenizers_in_worker(True, True)
    with pytest.raises(TypeError, match="encode_in_parent"):
        pitfalls.tokenizers_in_worker("true", "yes")
    with pytest.raises(ValueError, match="start_method"):
        pitfalls.tokenizers_in_worker("true", True, "thread")
    with pytest.raises(ValueError, match="timeout"):
        pitfalls.tokenizers_in_worker("true", True, timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        pitfalls.tokenizers_in_worker("true", True, timeout=-1)
    with pytest.raises(TypeError, match="backward_in_parent"):
        pitfalls.backward_then_fork("yes")


def test_tiny_tokenizer_encodes_its_words_and_marks_unknown_ones():
    tokenizer = pitfalls.tiny_tokenizer(("the cat sat", "a dog"))
    assert tokenizer.encode("the dog sat").ids == [1, 5, 3]
    assert tokenizer.encode("the bird").ids == [1, 0]  # "[UNK]" is 0


def _probe_and_variable(parallelism, encode_in_parent):
    """tokenizers_in_worker in a watchdog child, and the variable there afterwards (must be restored)."""

    os.environ["TOKENIZERS_PARALLELISM"] = "before"
    result = pitfalls.tokenizers_in_worker(parallelism, encode_in_parent)
    return result, os.environ.get("TOKENIZERS_PARALLELISM")


@needs_fork
def test_tokenizers_hang_a_forked_worker_only_with_parallelism_forced_after_use_in_the_parent():
    hung = watchdog.run(_probe_and_variable, "true", True, timeout=60, start_method="fork")
    assert hung.value == ("RuntimeError: DataLoader timed out after 3 seconds", "before")


@needs_fork
@pytest.mark.parametrize(("parallelism", "encode_in_parent"), [(None, True), ("true", False), ("false", True)])
def test_tokenizers_in_a_forked_worker_work_otherwise_and_print_nothing(parallelism, encode_in_parent):
    outcome = watchdog.run(_probe_and_variable, parallelism, encode_in_parent, timeout=60, start_method="fork")
    assert outcome.value == ("worker encoded: [6, 6, 5, 5]", "before")
    assert "just got forked" not in outcome.stderr  # the warning tokenizers printed before 0.22.2


@needs_fork
@pytest.mark.parametrize("first", [True, False])
def test_backward_in_a_forked_child_works_where_the_engine_starts_no_device_thread(first):
    if pitfalls.child_backward_breaks_after_fork():
        pytest.skip("a device is visible here: the child's backward is expected to fail after the parent's")
    probe = watchdog.run(pitfalls.backward_then_fork, first, timeout=60, start_method="fork").value
    assert probe["device threads the engine starts here"] == 0
    assert probe["parent's backward (CPU tensors)"] == ([0.0, 1.0, 2.0] if first else None)
    assert probe["forked child's backward"] == "returned [0.0, 1.0, 2.0]"
    assert probe["threads started by the parent's backward"] in (0, None)


@pytest.mark.parametrize(
    ("counts", "threads"),
    [
        ({}, 0),  # a CPU build: no accelerator registered
        ({"cpu": 2, "meta": 1, "lazy": 1}, 0),  # these run on the CPU ready queue
        ({"cuda": 0}, 0),  # a CUDA build on a machine without a GPU, or CUDA_VISIBLE_DEVICES=""
        ({"cuda": 1}, 1),  # a CUDA build on a GPU machine: a CPU backward arms the fork handler
        ({"cuda": 4, "xpu": 2}, 4),  # the largest count, not the sum: devices of different types share threads
        ({"mps": 1}, 1),  # Apple silicon's PyPI build
    ],
)
def test_autograd_device_threads_follows_the_engine(counts, threads):
    assert pitfalls.autograd_device_threads(counts) == threads


@pytest.mark.parametrize(
    ("counts", "error"),
    [([("cuda", 1)], TypeError), ({1: 1}, TypeError), ({"cuda": -1}, ValueError), ({"cuda": True}, ValueError)],
)
def test_autograd_device_threads_refuses_bad_counts(counts, error):
    with pytest.raises(error, match="device_counts"):
        pitfalls.autograd_device_threads(counts)


@pytest.mark.parametrize(
    ("counts", "breaks"), [({}, False), ({"cuda": 0}, False), ({"cuda": 2}, True), ({"mps": 1}, True)]
)
def test_children_that_run_backward_are_spawned_where_a_fork_would_break_them(monkeypatch, counts, breaks):
    monkeypatch.setattr(pitfalls, "accelerator_device_counts", lambda: counts)
    assert pitfalls.child_backward_breaks_after_fork() is breaks
    method = pitfalls._autograd_context().get_start_method()
    assert method == ("spawn" if breaks else pitfalls._fork_or_default().get_start_method())


def test_this_machine_sees_no_device_for_autograd():
    """The course's test machine has a CPU build: the notebook's stored outputs come from that case."""
    import torch

    if torch.accelerator.current_accelerator() is not None:
        pytest.skip("an accelerator build")
    assert pitfalls.accelerator_device_counts() == {}
    assert not pitfalls.child_backward_breaks_after_fork()


def test_numpy_array_seeds_always_set_state_word_0_to_0x80000000():
    import numpy as np
    from torch.utils.data._utils.worker import _generate_state

    for base_seed in (0, 12345, 2**40 + 7):
        for worker_id in (0, 1, 7):
            state = np.random.RandomState(_generate_state(base_seed, worker_id)).get_state()[1]
            assert int(state[0]) == 0x80000000
    assert int(np.random.RandomState(12345).get_state()[1][0]) == 12345  # an int seed: word 0 is the seed


@needs_fork
def test_the_tutorials_worker_init_fn_reads_the_same_word_in_every_worker_and_epoch():
    assert pitfalls.seed_words(epochs=2) == [["0x80000000", "0x80000000"]] * 2
    with pytest.raises(ValueError, match="epochs"):
        pitfalls.seed_words(epochs=0)


@needs_fork
def test_safe_get_trial_times_how_soon_a_dead_producer_is_noticed():
    import queue as queue_module

    def patient(queue, producer, timeout):
        while True:
            try:
                return queue.get(timeout=timeout)
            except queue_module.Empty:
                if not producer.is_alive():
                    raise RuntimeError("gone") from None

    # in a watchdog child, as the checker runs it: the queue and the shared value die with it
    dead = watchdog.run(pitfalls.safe_get_trial, patient, "crash", timeout=30, start_method="fork").value
    assert dead["result"] == "raised RuntimeError: gone" and 0 <= dead["after crash"] < 2.0, dead
    slow = watchdog.run(pitfalls.safe_get_trial, patient, "slow", timeout=30, start_method="fork").value
    assert slow == {"result": "returned 'payload'", "after crash": None}, slow
    # its first timed get is made to time out until the producer has sent and exited: no last look, no item
    late = watchdog.run(pitfalls.safe_get_trial, patient, "sent_then_exited", timeout=30, start_method="fork").value
    assert late == {"result": "raised RuntimeError: gone", "after crash": None}, late


def test_the_example_script_runs_and_leaves_nothing_behind():
    """examples/06_safe_patterns.py, the script notebook 06 ends with, runs as a learner would run it (a
    spawn child imports torch: seconds, more on a busy machine) and leaves nothing in its temporary folder;
    a leaked semaphore would make the resource tracker warn on stderr."""
    done = example_runner.run("06_safe_patterns.py", timeout=120)
    assert done.out.splitlines() == [
        "features: [0.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0]",
        "worker exit code: 0",
    ]
    assert done.err == "", done.err
