"""helpers.threads: a block's torch thread count never leaks into the caller's (the next cell's timing)."""

from __future__ import annotations

import pytest
import torch

from helpers.threads import torch_threads


def test_the_block_runs_at_its_count_and_the_callers_comes_back() -> None:
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_the_callers_count_comes_back_after_an_error() -> None:
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="in the block"), torch_threads(1):
        raise RuntimeError("in the block")
    assert torch.get_num_threads() == before


def test_without_a_count_the_block_sets_its_own_and_it_is_undone() -> None:
    before = torch.get_num_threads()
    with torch_threads():
        torch.set_num_threads(1)  # as a worker function run in the notebook's process does
    assert torch.get_num_threads() == before


@pytest.mark.parametrize(("n", "error"), [(0, ValueError), (-2, ValueError), ("2", TypeError), (True, TypeError)])
def test_a_count_that_is_not_a_positive_int_is_refused_before_anything_changes(n: object, error: type) -> None:
    before = torch.get_num_threads()
    with pytest.raises(error, match="n must be"), torch_threads(n):  # type: ignore[arg-type]
        pass
    assert torch.get_num_threads() == before
