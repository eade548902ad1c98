"""Checkers of notebook 03: the unedited placeholder and wrong answers a learner would plausibly write (each
tried) get "Not yet" every time, with a hint naming the real reason; the solutions get "Correct" every time."""

from __future__ import annotations

import copy
import multiprocessing as mp

import pytest
import torch

from helpers import checks

pytestmark = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checkers pin fork")
TIMES = 20
TIMES_WRONG = 3  # each wrong answer is refused before any worker trains: its verdict cannot depend on timing


def _all(fn, answer, start: str) -> None:
    for i in range(TIMES):
        result = fn(answer)
        assert repr(result).startswith(start), f"call {i + 1} of {TIMES}: {result!r}"
        assert bool(result) is (start == "Correct")


# Exercise 1: make the parent see the training.


def prepare_placeholder(model):
    pass  # the notebook's placeholder


def prepare_first_parameter_only(model):
    next(model.parameters()).share_memory_()  # shares one tensor, not the model


def prepare_without_calling(model):
    model.share_memory  # noqa: B018 - the method named, not called


def prepare_a_copy(model):
    copy.deepcopy(model).share_memory()  # shares a copy; the parent's model stays private


def prepare_first_layer(model):
    model[0].share_memory()  # one layer of three


def prepare_the_gradients(model):
    for p in model.parameters():  # gradients are private to each worker anyway
        p.grad = torch.zeros_like(p).share_memory_()


def prepare_with_a_strategy(model):
    torch.multiprocessing.set_sharing_strategy("file_descriptor")  # how tensors are sent, not what is shared


def prepare_and_zero(model):
    model.share_memory()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # shared, but a net of zeros never learns


def prepare_solution(model):
    model.share_memory()


def prepare_each_parameter(model):
    for p in model.parameters():  # the same as share_memory() for a model without buffers: accepted
        p.share_memory_()


@pytest.mark.parametrize(
    ("wrong", "words"),
    [
        (prepare_placeholder, "6 of 6 parameters"),
        (prepare_first_parameter_only, "5 of 6 parameters"),
        (prepare_without_calling, "6 of 6 parameters"),
        (prepare_a_copy, "6 of 6 parameters"),
        (prepare_first_layer, "4 of 6 parameters"),
        (prepare_the_gradients, "6 of 6 parameters"),
        (prepare_with_a_strategy, "6 of 6 parameters"),
        (prepare_and_zero, "changed the weights"),
        ("model.share_memory()", "must be a function"),  # a wrong type gets a verdict, not a traceback
    ],
)
def test_shared_model_wrong_answers_are_not_yet_every_time(wrong, words):
    for _ in range(TIMES_WRONG):
        result = checks.shared_model(wrong)
        assert repr(result).startswith("Not yet") and words in repr(result), repr(result)


def test_shared_model_solution_is_correct_every_time():
    _all(checks.shared_model, prepare_solution, "Correct")
    assert checks.shared_model(prepare_each_parameter)
    assert not checks.shared_model(None)


# Exercise 2: one set of momentum buffers for all workers.


def _params(optimizer):
    return [p for group in optimizer.param_groups for p in group["params"]]


def share_state_placeholder(optimizer):
    pass  # the notebook's placeholder: each worker creates its own buffers


def share_state_private(optimizer):
    for p in _params(optimizer):  # the typical mistake: buffers created, but not shared
        optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)


def share_state_first_only(optimizer):
    p = _params(optimizer)[0]
    optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p).share_memory_()


def share_state_wrong_key(optimizer):
    for p in _params(optimizer):
        optimizer.state[p]["momentum"] = torch.zeros_like(p).share_memory_()


def share_state_the_parameter(optimizer):
    for p in _params(optimizer):  # shared, but the buffer is the weight itself
        optimizer.state[p]["momentum_buffer"] = p


def share_state_ones(optimizer):
    for p in _params(optimizer):  # shared, but it changes the first steps
        optimizer.state[p]["momentum_buffer"] = torch.ones_like(p).share_memory_()


def share_state_the_gradients(optimizer):
    for p in _params(optimizer):
        p.grad = torch.zeros_like(p).share_memory_()


def share_state_like_a_model(optimizer):
    optimizer.share_memory()  # an optimizer has no such method


def share_state_scalars(optimizer):
    for p in _params(optimizer):
        optimizer.state[p]["momentum_buffer"] = torch.zeros(1).share_memory_()


def share_state_solution(optimizer):
    for p in _params(optimizer):
        optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p).share_memory_()


def share_state_from_a_detached_copy(optimizer):
    for p in _params(optimizer):  # another way to the same buffers: accepted
        optimizer.state[p]["momentum_buffer"] = p.detach().clone().zero_().share_memory_()


@pytest.mark.parametrize(
    ("wrong", "words"),
    [
        (share_state_placeholder, "0 of 6 parameters"),
        (share_state_private, "put them in shared memory"),
        (share_state_first_only, "1 of 6 parameters"),
        (share_state_wrong_key, "momentum_buffer"),
        (share_state_the_parameter, "the parameter itself"),
        (share_state_ones, "start each buffer as zeros"),
        (share_state_the_gradients, "0 of 6 parameters"),
        (share_state_like_a_model, "no share_memory()"),
        (share_state_scalars, "zeros shaped like its parameter"),
        (3, "must be a function"),
    ],
)
def test_shared_momentum_wrong_answers_are_not_yet_every_time(wrong, words):
    for _ in range(TIMES_WRONG):
        result = checks.shared_momentum(wrong)
        assert repr(result).startswith("Not yet") and words in repr(result), repr(result)


def test_shared_momentum_solution_is_correct_every_time():
    _all(checks.shared_momentum, share_state_solution, "Correct")
    assert checks.shared_momentum(share_state_from_a_detached_copy)
