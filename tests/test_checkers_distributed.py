"""The checkers of notebook 05 cannot be fooled: the unedited placeholder and the typical wrong answers
get "Not yet" 20 times out of 20, the solution "Correct" 20 times out of 20 (the course's rule for every
checker; these two are deterministic, so a single wrong verdict would be a bug, not bad luck)."""

import multiprocessing as mp

import pytest

from helpers import checks

RUNS = 20


def _average(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def _sum_only(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)


def _unchanged(model):
    return None


def _raises(model):
    return 1 / 0


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checker pins fork")
@pytest.mark.parametrize(
    "fn, words",
    [(_average, "Correct"), (_sum_only, "divide"), (_unchanged, "unchanged"), (_raises, "raised"), (None, "write")],
)
def test_average_gradients_checker(fn, words):
    verdicts = [checks.average_gradients(fn) for _ in range(RUNS if fn is not _raises else 1)]
    for result in verdicts:
        assert bool(result) is (words == "Correct")
        assert repr(result).startswith("Correct" if words == "Correct" else "Not yet") and words in repr(result)


def test_average_gradients_checker_rejects_a_non_function():
    with pytest.raises(TypeError, match="fn"):
        checks.average_gradients(3)


def _right_epochs(sampler, epochs):
    orders = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
    return orders


def _placeholder_epochs(sampler, epochs):  # the notebook's unedited cell: forgets set_epoch
    orders = []
    for _epoch in range(epochs):
        orders.append(list(sampler))
    return orders


def _set_epoch_after(sampler, epochs):  # a near miss: set_epoch after iterating shifts every epoch by one
    orders = []
    for epoch in range(epochs):
        orders.append(list(sampler))
        sampler.set_epoch(epoch)
    return orders


@pytest.mark.parametrize(
    "fn, words",
    [
        (_right_epochs, "Correct"),
        (_placeholder_epochs, "set_epoch"),
        (_set_epoch_after, "set_epoch"),
        (lambda sampler, epochs: None, "one list per epoch"),
        (lambda sampler, epochs: 1 / 0, "raised"),
        (None, "write my_epochs"),
    ],
)
def test_sampler_epochs_checker(fn, words):
    for _ in range(RUNS):
        result = checks.sampler_epochs(fn)
        assert bool(result) is (words == "Correct") and words in repr(result)
