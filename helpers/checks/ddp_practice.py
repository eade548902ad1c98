"""Checkers for notebook 07 (DDP in practice)."""

from __future__ import annotations

from typing import Any

from helpers.checks.core import Verdict, not_ready, verdict

__all__ = ["no_sync_accumulation", "resume_from_snapshot"]

K = 4  # micro-batches per optimizer step in the no_sync exercise


def no_sync_accumulation(fn: Any) -> Verdict:
    """Exercise: `fn(ddp, batches)` accumulates the gradients of `batches` (each loss divided by their
    number) with one all-reduce per optimizer step. Runs 2 forked ranks (so a notebook function can run
    there), counts the synchronising backward passes with a communication hook, and compares the
    gradient with one process on all ranks' micro-batches together."""
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
    if all(row["full"] for row in rows) and syncs == {1}:
        together = rows[0]["micro_batches"]
        return verdict(True, f"the gradient of all {together} micro-batches, with one all-reduce per step.", "")
    if syncs == {0}:
        return verdict(False, "", "no all-reduce ran at all: the last micro-batch must run outside no_sync().")
    if all(row["k_times"] for row in rows):
        return verdict(False, "", f"the gradient is {K} times too large: divide each loss by len(batches).")
    if all(row["full"] for row in rows):
        return verdict(
            False, "", f"right gradient, but {max(syncs)} all-reduces per step: run all but the last in no_sync()."
        )
    return verdict(False, "", "backward each micro-batch's loss / len(batches); only the last outside no_sync().")


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
