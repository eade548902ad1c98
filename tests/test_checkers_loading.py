"""Checkers of notebook 01: the unedited placeholder and the typical wrong answers get "Not yet" every
time (3 runs each, 20 for the two whose draws come from the clock or OS entropy), the solution gets
"Correct" every time (20 runs), and bad input is refused clearly."""

import numpy as np
import pytest
from torch.utils.data import get_worker_info

from helpers import checks
from helpers.loading import reseed_stored_rng, shard_bounds

RUNS = 20
RUNS_DETERMINISTIC = 3  # wrong answers whose verdict no timing, load or chance can change: 3 runs show it is stable


def verdicts(check, *args, runs=RUNS, **kwargs):
    """The distinct first words of `runs` verdicts: {"Correct:"} or {"Not"} when the checker is stable."""
    return {repr(check(*args, **kwargs)).split(" ")[0] for _ in range(runs)}


def placeholder_worker_init_fn(worker_id):
    # the notebook's placeholder: the tutorial's fix, seeded from the worker id alone
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(worker_id)


def from_os_entropy(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng()


def fixed_seed(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng(42)


def from_numpy_global_state(worker_id):
    # DataLoader seeds NumPy's global generator from an array: word 0 of its state is the same constant
    get_worker_info().dataset.rng = np.random.default_rng(int(np.random.get_state()[1][0]))


def seeds_the_global_generator(worker_id):
    np.random.seed(get_worker_info().seed % 2**32)  # the stored generator stays a copy in every worker


def from_the_clock(worker_id):
    import time

    get_worker_info().dataset.rng = np.random.default_rng(time.time_ns() + worker_id)


# RUNS for the answers seeded from the clock or OS entropy, whose draws change with time and chance; the
# others seed from fixed numbers (or raise), and the loader deals samples to its workers in a fixed order
# with a seeded generator, so their draws, and so their verdict, are the same every run.
@pytest.mark.parametrize(
    "fn, words, runs",
    [
        (placeholder_worker_init_fn, "every epoch draws the same numbers", RUNS_DETERMINISTIC),
        (lambda worker_id: None, "both workers still draw the same numbers", RUNS_DETERMINISTIC),
        (from_os_entropy, "change between runs", RUNS),
        (fixed_seed, "both workers still draw the same numbers", RUNS_DETERMINISTIC),
        (from_numpy_global_state, "both workers still draw the same numbers", RUNS_DETERMINISTIC),
        (seeds_the_global_generator, "both workers still draw the same numbers", RUNS_DETERMINISTIC),
        (from_the_clock, "change between runs", RUNS),
        (lambda worker_id: 1 / 0, "the loader failed", RUNS_DETERMINISTIC),
    ],
    ids=["placeholder-worker-id", "does-nothing", "os-entropy", "fixed", "numpy-state", "global", "clock", "raises"],
)
def test_worker_init_fn_wrong_answers(fn, words, runs):
    results = [checks.worker_init_fn(fn) for _ in range(runs)]
    assert [repr(r) for r in results if r or words not in repr(r)] == []


def test_worker_init_fn_solution():
    assert verdicts(checks.worker_init_fn, reseed_stored_rng) == {"Correct:"}


def test_worker_init_fn_none_and_type():
    assert verdicts(checks.worker_init_fn, None, runs=RUNS_DETERMINISTIC) == {"Not"}  # refused before any loader
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.worker_init_fn(3)


@pytest.mark.parametrize(
    "fn",
    [
        None,  # the placeholder
        lambda n, w, k: (0, n),  # the typical wrong answer: every worker yields everything
        lambda n, w, k: (w * (n // k), (w + 1) * (n // k)),  # drops the remainder
        lambda n, w, k: (w * -(-n // k), (w + 1) * -(-n // k)),  # the ceiling, not clamped to n
        lambda n, w, k: (w * (n // k), (w + 1) * (n // k) + 1),  # overlapping shards
        lambda n, w, k: (0, n) if w == 0 else (n, n),  # every item once, all on worker 0: nothing is split
        lambda n, w, k: (w * (n // k), n if w == k - 1 else (w + 1) * (n // k)),  # the remainder all on the last
    ],
    ids=["placeholder", "everything", "drops-remainder", "not-clamped", "overlap", "all-on-one", "last-takes-rest"],
)
def test_shard_bounds_wrong_answers(fn):
    # refused by the arithmetic on fixed cases, before any loader runs: the same verdict every run
    assert verdicts(checks.shard_bounds, fn, runs=RUNS_DETERMINISTIC) == {"Not"}


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (lambda n, w, k: (w * n / k, (w + 1) * n / k), "whole numbers"),  # floats: a verdict, not a TypeError
        (lambda n, w, k: (float(w * n // k), float((w + 1) * n // k)), "whole numbers"),
        (lambda n, w, k: None, "return a pair"),
        (lambda n, w, k: list(range(n))[w::k], "return a pair"),  # the items, strided, instead of bounds
        (lambda n, w, k: (str(w * n // k), str((w + 1) * n // k)), "whole numbers"),
    ],
    ids=["true-division", "float-of-floor", "none", "items", "strings"],
)
def test_shard_bounds_wrong_types_get_a_verdict(fn, reason):
    results = {repr(checks.shard_bounds(fn)) for _ in range(RUNS_DETERMINISTIC)}  # refused by type, before any loader
    assert len(results) == 1
    (result,) = results
    assert result.startswith("Not yet") and reason in result, result


def test_shard_bounds_solution():
    assert verdicts(checks.shard_bounds, shard_bounds) == {"Correct:"}


def test_shard_bounds_names_the_share_when_one_worker_takes_too_much():
    result = repr(checks.shard_bounds(lambda n, w, k: (0, n) if w == 0 else (n, n)))
    assert result.startswith("Not yet") and "more than its share" in result, result


def test_shard_bounds_accepts_other_balanced_splits():
    # floor bounds w * n // k: sizes differ by at most one, every item once (a right answer, not the course's)
    assert verdicts(checks.shard_bounds, lambda n, w, k: (w * n // k, (w + 1) * n // k)) == {"Correct:"}


def test_shard_bounds_needs_a_function():
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.shard_bounds("range")


# None: placeholder; 2: "the number of cores"; 5 and 8 keep up but are not the smallest count
@pytest.mark.parametrize("value", [None, 2, 3, 2.5, 5, 8, 9, True])
def test_io_workers_wrong_answers(value):
    assert verdicts(checks.io_workers, value, runs=RUNS_DETERMINISTIC) == {"Not"}  # arithmetic, nothing measured


def test_io_workers_solution():
    assert verdicts(checks.io_workers, 4) == {"Correct:"}


def test_io_workers_more_than_needed_does_not_give_the_answer_away():
    text = repr(checks.io_workers(6))
    assert "fewer would too" in text and "4" not in text
