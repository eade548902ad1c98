"""The checkers of notebook 05 cannot be fooled: the unedited placeholder and the wrong answers a learner
plausibly writes (each found by running it through the checker) get "Not yet" with a hint naming the real
reason every time, and right answers (the notebook's solution and other correct ways) get "Correct"
every time: 20 runs each for the sampler, 5 for the gradients (each run starts three ranks). Both checkers
are deterministic, so a single wrong verdict is a bug, not bad luck, and 3 runs of each wrong answer show
it (20 for the one that draws its epochs at random); a wrong type gets a verdict, never a traceback."""

import multiprocessing as mp
import random

import pytest

from helpers import checks

RUNS = 20
LAUNCH_RUNS = 5  # average_gradients starts three processes per call
RUNS_DETERMINISTIC = 3  # wrong answers whose verdict no timing, load or chance can change: 3 runs show it is stable


# ------------------------------------------------------------------------- exercise 1: average gradients
def _average(model):  # the notebook's solution
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def _avg_op(model):  # also right: gloo's AVG works on float tensors
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)


def _divide_first(model):  # also right: dividing before the sum gives the same average
    import torch.distributed as dist

    for p in model.parameters():
        p.grad /= dist.get_world_size()
        dist.all_reduce(p.grad)


def _sum_only(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)


def _divide_by_two(model):  # right with 2 ranks only
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= 2


def _divide_by_three(model):  # right with the checker's 3 ranks only
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= 3


def _divide_only(model):
    import torch.distributed as dist

    for p in model.parameters():
        p.grad /= dist.get_world_size()


def _reduce_a_copy(model):  # the sum lands in a copy, p.grad never changes
    import torch.distributed as dist

    for p in model.parameters():
        g = p.grad.clone()
        dist.all_reduce(g)
        g /= dist.get_world_size()


def _reduce_the_weights(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.data)
        p.data /= dist.get_world_size()


def _first_parameter_only(model):
    import torch.distributed as dist

    p = next(model.parameters())
    dist.all_reduce(p.grad)
    p.grad /= dist.get_world_size()


def _max(model):
    import torch.distributed as dist

    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.MAX)


def _broadcast(model):  # every rank takes rank 0's gradient
    import torch.distributed as dist

    for p in model.parameters():
        dist.broadcast(p.grad, src=0)


def _rank0_only(model):  # the others never join the collective
    import torch.distributed as dist

    if dist.get_rank() == 0:
        _average(model)


def _unchanged(model):
    return None


def _raises(model):
    return 1 / 0


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checker pins fork")
@pytest.mark.parametrize(
    "fn, words",
    [
        (_average, "Correct"),
        (_avg_op, "Correct"),
        (_divide_first, "Correct"),
        (None, "write my_average_gradients"),
        (_sum_only, "the sum over ranks"),
        (_divide_by_two, "divided by 2"),
        (_divide_by_three, "wrong with 2"),
        (_divide_only, "summed nothing"),
        (_reduce_a_copy, "still has its own gradients"),
        (_reduce_the_weights, "still has its own gradients"),
        (_first_parameter_only, "every parameter"),
        (_max, "not on the average"),
        (_broadcast, "not on the average"),
        (_unchanged, "still has its own gradients"),
        (_raises, "ZeroDivisionError"),
        (3, "must be a function"),
        ("def f(model): pass", "must be a function"),
    ],
)
def test_average_gradients_checker(fn, words):
    # a wrong answer's gradients are seeded numbers compared with allclose, nothing timed
    for _ in range(LAUNCH_RUNS if words == "Correct" else RUNS_DETERMINISTIC):
        result = checks.average_gradients(fn)
        assert bool(result) is (words == "Correct"), repr(result)
        assert repr(result).startswith("Correct" if words == "Correct" else "Not yet") and words in repr(result)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checker pins fork")
def test_average_gradients_checker_names_a_rank_that_skipped_the_collective():
    result = checks.average_gradients(_rank0_only)  # the other ranks leave: rank 0 loses its connection
    assert not result and ("same calls" in repr(result) or "same collectives" in repr(result)), repr(result)


# ---------------------------------------------------------------------------- exercise 2: sampler epochs
def _right_epochs(sampler, epochs):  # the notebook's solution
    orders = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        orders.append(list(sampler))
    return orders


def _epochs_from_one(sampler, epochs):  # also right: any epoch numbers every rank agrees on
    orders = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch + 1)
        orders.append(list(sampler))
    return orders


def _tensor_orders(sampler, epochs):  # also right: integer tensors of indices
    import torch

    return [torch.tensor(order) for order in _right_epochs(sampler, epochs)]


def _placeholder_epochs(sampler, epochs):  # the notebook's unedited cell: forgets set_epoch
    orders = []
    for _epoch in range(epochs):
        orders.append(list(sampler))
    return orders


def _set_epoch_after(sampler, epochs):  # set_epoch after iterating: epoch 1 repeats epoch 0
    orders = []
    for epoch in range(epochs):
        orders.append(list(sampler))
        sampler.set_epoch(epoch)
    return orders


def _always_epoch_zero(sampler, epochs):
    orders = []
    for _epoch in range(epochs):
        sampler.set_epoch(0)
        orders.append(list(sampler))
    return orders


def _random_epoch(sampler, epochs):  # a new order, but the ranks no longer agree on it
    orders = []
    for _epoch in range(epochs):
        sampler.set_epoch(random.randrange(10**9))
        orders.append(list(sampler))
    return orders


def _rank_in_epoch(sampler, epochs):  # the ranks disagree on the epoch: shares overlap
    orders = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch + sampler.rank)
        orders.append(list(sampler))
    return orders


def _shuffle_own_share(sampler, epochs):  # a new order, but each rank keeps its same samples
    orders = []
    for epoch in range(epochs):
        order = list(sampler)
        random.Random(epoch).shuffle(order)
        orders.append(order)
    return orders


def _one_epoch_fewer(sampler, epochs):
    return _right_epochs(sampler, epochs - 1)


def _flat(sampler, epochs):
    return [i for order in _right_epochs(sampler, epochs) for i in order]


@pytest.mark.parametrize(
    "fn, words",
    [
        (_right_epochs, "Correct"),
        (_epochs_from_one, "Correct"),
        (_tensor_orders, "Correct"),
        (None, "write my_epochs"),
        (_placeholder_epochs, "every epoch has the same order"),
        (_set_epoch_after, "*before* iterating"),
        (_always_epoch_zero, "every epoch has the same order"),
        (_random_epoch, "same epoch number"),
        (_rank_in_epoch, "same epoch number"),
        (_shuffle_own_share, "same samples every epoch"),
        (_one_epoch_fewer, "one list of ints per epoch"),
        (_flat, "a list of 3 lists"),
        (lambda sampler, epochs: None, "a list of 3 lists"),
        (lambda sampler, epochs: 1 / 0, "raised ZeroDivisionError"),
        ("[[0, 1]]", "must be a function"),
    ],
)
def test_sampler_epochs_checker(fn, words):
    # orders from a seeded sampler in this process: only _random_epoch's verdict rests on chance
    for _ in range(RUNS if words == "Correct" or fn is _random_epoch else RUNS_DETERMINISTIC):
        result = checks.sampler_epochs(fn)
        assert bool(result) is (words == "Correct"), repr(result)
        assert repr(result).startswith("Correct" if words == "Correct" else "Not yet") and words in repr(result)
