"""Checkers of notebook 03: the unedited placeholder and the typical wrong answer get "Not yet" every time,
the solution gets "Correct" every time (20 calls each)."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch

from helpers import checks

pytestmark = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checkers pin fork")
TIMES = 20


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


def prepare_solution(model):
    model.share_memory()


@pytest.mark.parametrize("wrong", [prepare_placeholder, prepare_first_parameter_only])
def test_shared_model_wrong_answers_are_not_yet_every_time(wrong):
    _all(checks.shared_model, wrong, "Not yet")


def test_shared_model_solution_is_correct_every_time():
    _all(checks.shared_model, prepare_solution, "Correct")


def test_shared_model_refuses_a_non_function():
    assert not checks.shared_model(None)
    with pytest.raises(TypeError):
        checks.shared_model("model.share_memory()")


# Exercise 2: one set of momentum buffers for all workers.


def share_state_placeholder(optimizer):
    pass  # the notebook's placeholder: each worker creates its own buffers


def share_state_private(optimizer):
    for group in optimizer.param_groups:  # the typical mistake: buffers created, but not shared
        for p in group["params"]:
            optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)


def share_state_solution(optimizer):
    for group in optimizer.param_groups:
        for p in group["params"]:
            optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p).share_memory_()


@pytest.mark.parametrize("wrong", [share_state_placeholder, share_state_private])
def test_shared_momentum_wrong_answers_are_not_yet_every_time(wrong):
    _all(checks.shared_momentum, wrong, "Not yet")


def test_shared_momentum_solution_is_correct_every_time():
    _all(checks.shared_momentum, share_state_solution, "Correct")
