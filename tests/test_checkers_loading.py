"""Checkers of notebook 01: the unedited placeholder and the typical wrong answers get "Not yet" every
time (20 runs each), the solution gets "Correct" every time, and bad input is refused clearly."""

import numpy as np
import pytest
from torch.utils.data import get_worker_info

from helpers import checks
from helpers.loading import reseed_stored_rng, shard_bounds

RUNS = 20


def verdicts(check, *args, **kwargs):
    """The distinct first words of RUNS verdicts: {"Correct:"} or {"Not"} when the checker is stable."""
    return {repr(check(*args, **kwargs)).split(" ")[0] for _ in range(RUNS)}


def placeholder_worker_init_fn(worker_id):
    # the notebook's placeholder: the tutorial's fix, seeded from the worker id alone
    info = get_worker_info()
    info.dataset.rng = np.random.default_rng(worker_id)


def from_os_entropy(worker_id):
    get_worker_info().dataset.rng = np.random.default_rng()


@pytest.mark.parametrize(
    "fn, words",
    [
        (placeholder_worker_init_fn, "every epoch draws the same numbers"),
        (lambda worker_id: None, "both workers still draw the same numbers"),
        (from_os_entropy, "change between runs"),
    ],
    ids=["placeholder-worker-id", "does-nothing", "os-entropy"],
)
def test_worker_init_fn_wrong_answers(fn, words):
    results = [checks.worker_init_fn(fn) for _ in range(RUNS)]
    assert [repr(r) for r in results if r or words not in repr(r)] == []


def test_worker_init_fn_solution():
    assert verdicts(checks.worker_init_fn, reseed_stored_rng) == {"Correct:"}


def test_worker_init_fn_none_and_type():
    assert verdicts(checks.worker_init_fn, None) == {"Not"}
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.worker_init_fn(3)


@pytest.mark.parametrize(
    "fn",
    [
        None,  # the placeholder
        lambda n, w, k: (0, n),  # the typical wrong answer: every worker yields everything
        lambda n, w, k: (w * (n // k), (w + 1) * (n // k)),  # drops the remainder
    ],
    ids=["placeholder", "everything", "drops-remainder"],
)
def test_shard_bounds_wrong_answers(fn):
    assert verdicts(checks.shard_bounds, fn) == {"Not"}


def test_shard_bounds_solution():
    assert verdicts(checks.shard_bounds, shard_bounds) == {"Correct:"}


def test_shard_bounds_needs_a_function():
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.shard_bounds("range")


# None: placeholder; 2: "the number of cores"; 5 and 8 keep up but are not the smallest count
@pytest.mark.parametrize("value", [None, 2, 3, 2.5, 5, 8, 9, True])
def test_io_workers_wrong_answers(value):
    assert verdicts(checks.io_workers, value) == {"Not"}


def test_io_workers_solution():
    assert verdicts(checks.io_workers, 4) == {"Correct:"}


def test_io_workers_more_than_needed_does_not_give_the_answer_away():
    text = repr(checks.io_workers(6))
    assert "fewer would too" in text and "4" not in text
