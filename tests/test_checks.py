import multiprocessing as mp

import pytest
import torch

from helpers import checks


def test_verdict_is_truthy_only_when_right_and_reads_as_one_line():
    good, bad = checks.verdict(True, "well done", "try again"), checks.verdict(False, "well done", "try again")
    assert bool(good) is True and repr(good) == "Correct: well done"
    assert bool(bad) is False and repr(bad) == "Not yet: try again"


@pytest.mark.parametrize(
    "fn, ok",
    [
        (lambda p, c: max(1, c // p), True),
        (lambda p, c: c // p, False),  # 0 threads when processes > cores
        (lambda p, c: c, False),  # oversubscribes
        (lambda p, c: None, False),
        (lambda p, c: 1 / 0, False),
        (lambda p, c: max(1.0, c / p), False),
    ],
)
def test_threads_per_process(fn, ok):
    result = checks.threads_per_process(fn)
    assert bool(result) is ok
    assert repr(result).startswith("Correct" if ok else "Not yet")


def test_threads_per_process_needs_a_function():
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.threads_per_process(4)


def test_fork_safe_settings_verdicts():
    assert not checks.fork_safe_settings(None, None)
    assert not checks.fork_safe_settings("thread", 2)
    assert not checks.fork_safe_settings("spawn", 1)
    assert repr(checks.fork_safe_settings("spawn", 2, timeout=60)).startswith("Correct")


def test_fork_safe_settings_catches_the_openmp_hang():
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork here")
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # an earlier test may have left this process single-threaded
    try:
        torch.ones(4_000_000).sum()  # make sure OpenMP's pool of 2 threads exists in this process
        result = checks.fork_safe_settings("fork", 2, timeout=3)
    finally:
        torch.set_num_threads(threads)
    assert not result and "hung" in repr(result)


GOOD = """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        print("results:", pool.map(square, range(4)))
"""


def test_main_guard_script_verdicts():
    assert checks.main_guard_script(GOOD, timeout=30)
    assert not checks.main_guard_script(GOOD.replace("print(", "(").replace('"results:", ', ""), timeout=30)
    unguarded = GOOD.replace('if __name__ == "__main__":\n    ', "").replace("\n        print", "\n    print")
    result = checks.main_guard_script(unguarded, timeout=3)
    assert not result and "hung" in repr(result) and "bootstrapping phase" in repr(result)
    assert not checks.main_guard_script("", timeout=5)
    assert not checks.main_guard_script(None, timeout=5)
    assert not checks.main_guard_script("raise SystemExit(2)", timeout=5)


def test_worker_init_fn_checker():
    from helpers.loading import reseed_stored_rng

    assert not checks.worker_init_fn(None)
    assert checks.worker_init_fn(reseed_stored_rng)
    assert not checks.worker_init_fn(lambda worker_id: None)  # still duplicated
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.worker_init_fn(3)


def test_shard_bounds_checker():
    from helpers.loading import shard_bounds

    assert not checks.shard_bounds(None)
    assert checks.shard_bounds(shard_bounds)
    assert not checks.shard_bounds(lambda n, w, k: (0, n))  # every worker yields everything
    assert not checks.shard_bounds(lambda n, w, k: (w * (n // k), (w + 1) * (n // k)))  # drops the remainder
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.shard_bounds("range")


@pytest.mark.parametrize("value, ok", [(None, False), (2.5, False), (3, False), (4, True), (8, True), (9, False)])
def test_io_workers_checker(value, ok):
    assert bool(checks.io_workers(value)) is ok


def test_keep_received_checker():
    assert not checks.keep_received(None)
    assert not checks.keep_received(lambda t: t)
    assert checks.keep_received(lambda t: t.clone())
    with pytest.raises(TypeError):
        checks.keep_received("clone")


def test_collect_checker():
    def wrong(queue, process):
        process.join()
        return queue.get(timeout=10)

    def right(queue, process):
        item = queue.get(timeout=10)
        process.join(10)
        return item

    assert not checks.collect(None)
    result = checks.collect(wrong)
    assert not result and "hung" in repr(result)
    assert checks.collect(right)


def test_exact_counter_checker():
    def unlocked(counter):
        counter.value += 1

    def locked(counter):
        with counter.get_lock():
            counter.value += 1

    def double(counter):
        with counter.get_lock():
            counter.value += 2

    assert not checks.exact_counter(None)
    assert checks.exact_counter(locked)
    assert not checks.exact_counter(double)
    assert not checks.exact_counter(unlocked)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checker pins fork")
def test_shared_model_checker():
    assert not checks.shared_model(None)
    assert not checks.shared_model(lambda model: None)
    assert checks.shared_model(lambda model: model.share_memory())
    with pytest.raises(TypeError):
        checks.shared_model("model.share_memory()")


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checker pins fork")
def test_shared_momentum_checker():
    def private(optimizer):
        for group in optimizer.param_groups:
            for p in group["params"]:
                optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)

    def shared(optimizer):
        for group in optimizer.param_groups:
            for p in group["params"]:
                optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p).share_memory_()

    assert not checks.shared_momentum(lambda optimizer: None)
    assert not checks.shared_momentum(private)
    assert checks.shared_momentum(shared)


def test_imap_pipeline_checker():
    from helpers.pool import delayed_square

    def streaming(method):
        def pipeline(pool, items, bar):
            results = []
            for result in getattr(pool, method)(delayed_square, items):
                results.append(result)
                bar.update(1)
            return results

        return pipeline

    def all_at_once(pool, items, bar):
        results = pool.map(delayed_square, items)
        bar.update(len(items))
        return results

    def bar_at_the_end(pool, items, bar):
        results = list(pool.imap(delayed_square, items))
        for _ in results:
            bar.update(1)
        return results

    assert not checks.imap_pipeline(None)
    assert checks.imap_pipeline(streaming("imap"))
    assert "pool.imap" in repr(checks.imap_pipeline(all_at_once))
    assert not checks.imap_pipeline(streaming("imap_unordered"))
    assert "bar.update(1)" in repr(checks.imap_pipeline(bar_at_the_end))
    assert "raised ZeroDivisionError" in repr(checks.imap_pipeline(lambda pool, items, bar: 1 / 0))
    assert "return the list" in repr(checks.imap_pipeline(lambda pool, items, bar: None))
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.imap_pipeline("imap")


@pytest.mark.parametrize(
    "value, ok, words",
    [
        (None, False, "set my_chunksize"),
        (0, False, "whole number"),
        (2.5, False, "whole number"),
        (True, False, "whole number"),
        (1, False, "overhead"),
        (250, False, "slow tail"),  # map's default for 4,000 tasks on 4 workers
        (10_000, False, "slow tail"),
        (10, True, "Correct"),
        (5, True, "Correct"),
    ],
)
def test_chunksize_choice_checker(value, ok, words):
    result = checks.chunksize_choice(value)
    assert bool(result) is ok and words in repr(result)
