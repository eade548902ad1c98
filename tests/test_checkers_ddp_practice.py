"""The checkers of notebook 07 cannot be fooled: the notebook's placeholder and the typical wrong answers
get "Not yet" every time (3 runs each: no verdict here rests on timing), the solution "Correct" every time
(20 runs)."""

import multiprocessing as mp

import pytest
import torch

from helpers.checks import ddp_practice as checks

RUNS = 20
RUNS_DETERMINISTIC = 3  # wrong answers whose verdict no timing, load or chance can change: 3 runs show it is stable
needs_fork = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checker pins fork")


# ------------------------------------------------------------------------------ no_sync accumulation
def placeholder_accumulate(ddp, batches):
    """The notebook's placeholder: correct gradients, but every micro-batch all-reduces."""
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(ddp(x), y) / len(batches)
        loss.backward()


def solution_accumulate(ddp, batches):
    *first, (x_last, y_last) = batches
    with ddp.no_sync():
        for x, y in first:
            (torch.nn.functional.mse_loss(ddp(x), y) / len(batches)).backward()
    (torch.nn.functional.mse_loss(ddp(x_last), y_last) / len(batches)).backward()


def all_in_no_sync(ddp, batches):
    """A typical wrong answer: every micro-batch inside no_sync, so nothing is ever all-reduced."""
    with ddp.no_sync():
        placeholder_accumulate(ddp, batches)


def not_divided(ddp, batches):
    """Another: no_sync right, but the losses are not divided by the number of micro-batches."""
    *first, (x_last, y_last) = batches
    with ddp.no_sync():
        for x, y in first:
            torch.nn.functional.mse_loss(ddp(x), y).backward()
    torch.nn.functional.mse_loss(ddp(x_last), y_last).backward()


def one_big_forward(ddp, batches):
    """Same gradient and one all-reduce, but one forward over all micro-batches: no memory saved."""
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    torch.nn.functional.mse_loss(ddp(x), y).backward()


def summed_losses(ddp, batches):
    """One all-reduce and the right gradient, but every micro-batch's graph is alive until one backward."""
    loss = sum(torch.nn.functional.mse_loss(ddp(x), y) for x, y in batches) / len(batches)
    loss.backward()


def syncs_first(ddp, batches):
    """The backward outside no_sync comes first: it all-reduces one micro-batch, the rest stays local."""
    (x0, y0), *rest = batches
    (torch.nn.functional.mse_loss(ddp(x0), y0) / len(batches)).backward()
    with ddp.no_sync():
        for x, y in rest:
            (torch.nn.functional.mse_loss(ddp(x), y) / len(batches)).backward()


def zero_grad_between(ddp, batches):
    """Zeroes .grad before each micro-batch: only the last one's gradient is left."""
    *first, (x_last, y_last) = batches
    with ddp.no_sync():
        for x, y in first:
            ddp.zero_grad()
            (torch.nn.functional.mse_loss(ddp(x), y) / len(batches)).backward()
    ddp.zero_grad()
    (torch.nn.functional.mse_loss(ddp(x_last), y_last) / len(batches)).backward()


WRONG = [
    (one_big_forward, "one forward ran on 32 samples"),
    (summed_losses, "held the activations of 32 samples"),
    (syncs_first, "must be the last one"),
    (zero_grad_between, "no zero_grad in between"),
    (not_divided, "divide each loss"),
]


@needs_fork
@pytest.mark.parametrize("fn, words", WRONG, ids=[fn.__name__ for fn, _ in WRONG])
def test_no_sync_plausible_wrong_answers_are_refused_for_the_real_reason(fn, words):
    for _ in range(RUNS_DETERMINISTIC):
        verdict = checks.no_sync_accumulation(fn)
        assert not verdict and repr(verdict).startswith("Not yet") and words in repr(verdict), repr(verdict)


@needs_fork
def test_no_sync_placeholder_is_never_accepted():
    # counted all-reduces and a seeded gradient, nothing timed: the same verdict every run
    for _ in range(RUNS_DETERMINISTIC):
        verdict = checks.no_sync_accumulation(placeholder_accumulate)
        assert not verdict and "all-reduces per step" in repr(verdict), repr(verdict)


@needs_fork
def test_no_sync_everything_inside_is_never_accepted():
    # counted all-reduces (none), nothing timed: the same verdict every run
    for _ in range(RUNS_DETERMINISTIC):
        verdict = checks.no_sync_accumulation(all_in_no_sync)
        assert not verdict and "no all-reduce ran" in repr(verdict), repr(verdict)


@needs_fork
def test_no_sync_solution_is_always_accepted():
    for _ in range(RUNS):
        verdict = checks.no_sync_accumulation(solution_accumulate)
        assert verdict and repr(verdict).startswith("Correct"), repr(verdict)


@needs_fork
def test_no_sync_other_mistakes():
    verdict = checks.no_sync_accumulation(lambda ddp, batches: 1 / 0)
    assert not verdict and "ZeroDivisionError" in repr(verdict)


def test_no_sync_unwritten_and_wrong_type():
    assert "write my_accumulate" in repr(checks.no_sync_accumulation(None))
    with pytest.raises(TypeError):
        checks.no_sync_accumulation(3)


# ----------------------------------------------------------------------------------- resume
def placeholder_resume(path, model, optimizer):
    """The notebook's placeholder: ignores the snapshot and starts over."""
    return 0


def model_only(path, model, optimizer):
    """The typical wrong answer: the weights come back, the optimizer's momentum does not, and the
    finished epoch is run again."""
    snapshot = torch.load(path, weights_only=True)
    model.load_state_dict(snapshot["model"])
    return snapshot["epoch"]


def repeats_epoch(path, model, optimizer):
    snapshot = torch.load(path, weights_only=True)
    model.load_state_dict(snapshot["model"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return snapshot["epoch"]


def model_only_right_epoch(path, model, optimizer):
    """The epoch is right, the optimizer's momentum is not restored."""
    snapshot = torch.load(path, weights_only=True)
    model.load_state_dict(snapshot["model"])
    return snapshot["epoch"] + 1


def float_epoch(path, model, optimizer):
    """Everything restored, but the epoch comes back as a float."""
    snapshot = torch.load(path, weights_only=True)
    model.load_state_dict(snapshot["model"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return float(snapshot["epoch"] + 1)


def solution_resume(path, model, optimizer):
    snapshot = torch.load(path, weights_only=True)
    model.load_state_dict(snapshot["model"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return snapshot["epoch"] + 1


@pytest.mark.parametrize(
    "fn, words",
    [
        (placeholder_resume, "load snapshot['model']"),
        (model_only, "momentum is lost"),
        (model_only_right_epoch, "momentum is lost"),
        (float_epoch, "an int"),
    ],
)
def test_resume_wrong_answers_are_never_accepted(fn, words):
    # one seeded run in this process, nothing timed: the same verdict every run
    for _ in range(RUNS_DETERMINISTIC):
        verdict = checks.resume_from_snapshot(fn)
        assert not verdict and words in repr(verdict), repr(verdict)


def test_resume_repeated_epoch_and_types():
    verdict = checks.resume_from_snapshot(repeats_epoch)
    assert not verdict and "last one finished" in repr(verdict)
    assert "return the epoch" in repr(checks.resume_from_snapshot(lambda p, m, o: None))
    assert "raised" in repr(checks.resume_from_snapshot(lambda p, m, o: 1 / 0))
    assert "write my_resume" in repr(checks.resume_from_snapshot(None))
    with pytest.raises(TypeError):
        checks.resume_from_snapshot("no")


def test_resume_solution_is_always_accepted():
    for _ in range(RUNS):
        verdict = checks.resume_from_snapshot(solution_resume)
        assert verdict and repr(verdict).startswith("Correct"), repr(verdict)
