"""Checkers for notebook 07 (DDP in practice)."""

from __future__ import annotations

from typing import Any

from helpers.checks.core import Verdict, not_ready, verdict

__all__ = ["no_sync_accumulation", "resume_from_snapshot"]

K = 4  # micro-batches per optimizer step in the no_sync exercise


def no_sync_accumulation(fn: Any) -> Verdict:
    """Exercise: `fn(ddp, batches)` accumulates the gradients of `batches` (each loss divided by their
    number) with one all-reduce per optimizer step, holding one micro-batch's activations at a time
    (what accumulation is for: a batch too large for memory). Runs 2 forked ranks (so a notebook
    function can run there) and measures the three goals: the gradient against one process on all
    ranks' micro-batches together, the synchronising backward passes (a communication hook), and the
    most samples whose activations were held at once (hooks on the model, `track_held_samples`)."""
    if (unready := not_ready(fn, "my_accumulate", "(ddp, batches) -> None")) is not None:
        return unready
    from helpers.ddp_practice import accumulation_rank, launch
    from helpers.launcher import describe_error

    kwargs = {"accumulation_rank": {"accumulate": fn, "k": K}}
    try:
        results = launch([accumulation_rank], 2, start_method="fork", kwargs=kwargs, timeout=60)
    except Exception as exc:  # noqa: BLE001 - a learner's function may break the group
        return verdict(False, "", f"the ranks failed: {describe_error(exc)}")
    rows = [results[r]["accumulation_rank"] for r in sorted(results)]
    if any(row["error"] for row in rows):
        return verdict(False, "", f"your function raised {next(row['error'] for row in rows if row['error'])}")
    syncs = {step["syncs"] for row in rows for step in row["per_step"]}
    size = rows[0]["size"]
    peak = max(row["peak_held"] for row in rows)
    largest = max(row["largest_forward"] for row in rows)
    full = all(row["full"] for row in rows)
    if largest > size:
        return verdict(
            False,
            "",
            f"one forward ran on {largest} samples at once: same gradient, but it holds the activations of "
            f"the whole batch, which is what accumulation avoids. Run forward and backward per micro-batch "
            f"({size} samples).",
        )
    if peak > size:
        return verdict(
            False,
            "",
            f"your step held the activations of {peak} samples at once (forwards of several micro-batches "
            f"before their backward): backward each micro-batch's loss before the next forward.",
        )
    if full and syncs == {1}:
        together = rows[0]["micro_batches"]
        return verdict(
            True,
            f"the gradient of all {together} micro-batches, with one all-reduce per step and at most "
            f"{peak} samples' activations held at once.",
            "",
        )
    if syncs == {0}:
        return verdict(False, "", "no all-reduce ran at all: the last micro-batch must run outside no_sync().")
    if all(row["k_times"] for row in rows):
        return verdict(False, "", f"the gradient is {K} times too large: divide each loss by len(batches).")
    if full:
        return verdict(
            False, "", f"right gradient, but {max(syncs)} all-reduces per step: run all but the last in no_sync()."
        )
    if syncs == {1}:
        return verdict(
            False,
            "",
            "one all-reduce per step, but not of the whole sum: the backward outside no_sync() must be the "
            "last one, after every other micro-batch has added to .grad (and no zero_grad in between).",
        )
    return verdict(
        False,
        "",
        "the gradient differs from one process on all micro-batches: every micro-batch's loss / "
        "len(batches) must add into .grad (no zero_grad in between), only the last backward outside no_sync().",
    )


def resume_from_snapshot(fn: Any) -> Verdict:
    """Exercise: `fn(path, model, optimizer)` restores a snapshot written by `save_snapshot` after an
    epoch and returns the epoch to continue with, so that the resumed run ends with weights bitwise
    equal to those of a run that was never interrupted. One process, no timing: the same verdict always."""
    if (unready := not_ready(fn, "my_resume", "(path, model, optimizer) -> int", needs_fork=False)) is not None:
        return unready
    from helpers.ddp_practice import resume_run
    from helpers.errors import short_error

    try:
        got = resume_run(fn, epochs=4, stop_after=1)
    except Exception as exc:  # noqa: BLE001 - a learner's function may raise anything
        return verdict(False, "", f"your function raised {short_error(exc)}")
    start = got["start"]
    if got["bitwise equal"]:
        return verdict(True, "the resumed run ends bitwise equal to the run that was never interrupted.", "")
    if not isinstance(start, int) or isinstance(start, bool):
        return verdict(False, "", f"return the epoch to continue with (an int), not {type(start).__name__}.")
    if not got["loaded model"]:
        return verdict(False, "", "load snapshot['model'] into the model (model.load_state_dict).")
    if not got["loaded optimizer"]:
        return verdict(False, "", "the optimizer's momentum is lost: load snapshot['optimizer'] into it too.")
    if start != 2:
        return verdict(False, "", f"you continue with epoch {start}: snapshot['epoch'] is the last one finished.")
    return verdict(False, "", "load both states and return snapshot['epoch'] + 1.")
