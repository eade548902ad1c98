"""Checkers for notebook 08 (the capstone)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from helpers.checks.core import Verdict, verdict

__all__ = ["batch_lr", "second_job", "SPEEDUP", "RULE_TOLERANCE"]

SPEEDUP = 3.0  # the exercise's required speed-up of the main process's CPU time
MOVED = 0.25  # CPU of other processes (DataLoader workers aside) above this share of the original's: work moved
BATCH = 32  # exercise 1's batch size (the original's is capstone.ORIGINAL.batch_size)
RULE_TOLERANCE = 1.5  # exercise 1 accepts a learning rate within this factor of the linearly scaled one


def batch_lr(lr: Any, samples: int = 1024) -> Verdict:
    """Exercise: the learning rate for batches of 32 (the original: 8 at `ORIGINAL.lr`), by the rule that
    carries over to real jobs: scale it with the batch (the linear scaling rule of notebook 07), within a
    factor of `RULE_TOLERANCE` of `ORIGINAL.lr * 4`, and reach the target accuracy on the same budget of
    samples. Both are checked: on this small, well-conditioned problem rates far above the scaled one
    also reach the target (25x does), which teaches nothing that holds elsewhere, and a rate inside the
    band must still train. Trained in this process (no workers, no waits: deterministic for a given
    seed), so the verdict is the same on every machine."""
    from helpers import capstone

    if lr is None:
        return verdict(False, "", "set my_lr, then run this cell again.")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
        return verdict(False, "", f"a learning rate is a positive number, got {lr!r}.")
    factor = BATCH // capstone.ORIGINAL.batch_size
    scaled = capstone.ORIGINAL.lr * factor
    config = replace(capstone.ORIGINAL, batch_size=BATCH, lr=float(lr), wait=0.0, passes=1, samples=samples)
    run = capstone.train(config)
    steps = samples // BATCH
    reached = f"lr={lr:g} reaches {run.accuracy:.1f}% (target {capstone.TARGET_ACCURACY:g}%)"
    if lr < scaled / RULE_TOLERANCE:
        growth = f"{lr / capstone.ORIGINAL.lr:.2g}x the original rate for a batch {factor}x larger"
        if run.accuracy < capstone.TARGET_ACCURACY:
            why = f"with {factor}x fewer steps ({steps}) each step must move further"
            return verdict(False, "", f"{reached}: {growth}; {why}: scale the rate as the batch grew.")
        return verdict(
            False,
            "",
            f"{reached} on this small problem, but {growth} is not the linear scaling rule (the rate grows "
            f"as the batch does, {factor}x here): the target is met here by a margin a real job need not have.",
        )
    if lr > scaled * RULE_TOLERANCE:
        if run.accuracy < capstone.TARGET_ACCURACY:
            return verdict(False, "", f"{reached}: a step that large overshoots.")
        return verdict(
            False,
            "",
            f"{reached} on this small problem, but it is {lr / scaled:.2g}x the rate the linear scaling rule "
            f"gives, which can diverge on a real job: scale the rate as the batch grew ({factor}x).",
        )
    if run.accuracy < capstone.TARGET_ACCURACY:
        return verdict(False, "", f"{reached}: close to the rule, but short of the target; scale by {factor}x.")
    return verdict(
        True,
        f"lr={lr:g} reaches {run.accuracy:.1f}% in {steps} steps of {BATCH} (target {capstone.TARGET_ACCURACY:g}%). "
        f"Scaling the learning rate with the batch (x{factor} here) is the linear scaling rule.",
        "",
    )


def _probe_matches(job: Any) -> str | None:
    """None when the job's prepare gives the original's rows and labels on a probe batch, else why not."""
    import torch

    from helpers import capstone

    data = capstone.RawDataset(n=32, seed=5)
    want_x, want_y = capstone.slow_prepare(data.x, data.y)
    try:
        got_x, got_y = job.prepare(data.x.clone(), data.y.clone())
    except Exception as exc:  # noqa: BLE001 - the learner's function may raise anything
        from helpers.errors import short_error

        return f"prepare raised {short_error(exc, line='last')}"
    if not isinstance(got_x, torch.Tensor) or tuple(got_x.shape) != tuple(want_x.shape):
        shape = tuple(got_x.shape) if isinstance(got_x, torch.Tensor) else type(got_x).__name__
        return f"prepare must return the rows the original gives, shape {tuple(want_x.shape)}; got {shape}"
    if not torch.equal(torch.as_tensor(got_y), want_y):
        return "prepare changed the labels"
    if not torch.allclose(got_x.float(), want_x, atol=1e-4):
        return "prepare's rows differ from the original's: average the readings, then standardise each row"
    return None


def second_job(job: Any, samples: int = 2048, n: int = 1024, repeats: int = 2) -> Verdict:
    """Exercise: make the second job at least `SPEEDUP` times faster with the same work and accuracy.

    The learner's `capstone.SecondJob` is run against the original on the same `samples`; the speed-up
    is measured on the main process's CPU time (the job's bottleneck is there, and another program on the
    machine moves CPU time far less than wall time), best of `repeats` each, interleaved; the repeats run
    only when the first pair comes out within a factor of 2 of the required speed-up. It fails when
    fewer samples reached the model, when the prepared rows differ from the original's on a probe batch,
    or when the accuracy drops by more than 2 points. Every answer but the unedited placeholder is
    measured, workers alone included."""
    from helpers import capstone

    if job is None:
        return verdict(False, "", "set my_second_job to a capstone.SecondJob, then run this cell again.")
    if not isinstance(job, capstone.SecondJob):
        return verdict(False, "", f"my_second_job must be a capstone.SecondJob, got {type(job).__name__}.")
    if job.prepare is capstone.slow_prepare and not job.num_workers:
        return verdict(False, "", "my_second_job is still the original job: change its prepare or its workers.")
    if (why := _probe_matches(job)) is not None:
        return verdict(False, "", f"{why}.")
    mine = [capstone.train_second(job, samples=samples, n=n)]
    if mine[0].samples != samples:
        return verdict(False, "", f"only {mine[0].samples} of {samples} samples reached the model.")
    base = [capstone.train_second(capstone.SecondJob(), samples=samples, n=n)]
    first = base[0].cpu / mine[0].cpu
    near = SPEEDUP / 2 < first < SPEEDUP * 2  # far from the threshold, more runs cannot change the verdict
    for _ in range(repeats - 1 if near else 0):
        mine.append(capstone.train_second(job, samples=samples, n=n))
        base.append(capstone.train_second(capstone.SecondJob(), samples=samples, n=n))
    accuracy, reference = mine[0].accuracy, base[0].accuracy
    if accuracy < reference - 2.0:
        return verdict(False, "", f"accuracy {accuracy:.1f}% against the original's {reference:.1f}%.")
    moved = min(r.others_cpu for r in mine)
    if moved > MOVED * min(r.cpu for r in base):
        return verdict(
            False, "", f"other processes did {moved:.2f} s of CPU work for your prepare (the original's whole "
            f"main-process CPU: {min(r.cpu for r in base):.2f} s): handing the work to a pool moves it, it does "
            "not make it smaller. Make prepare itself cheaper: one tensor operation on the whole batch.",
        )  # fmt: skip
    ratio = min(r.cpu for r in base) / min(r.cpu for r in mine)
    if ratio < SPEEDUP:
        if job.prepare is capstone.slow_prepare:
            hint = (
                f"you added {job.num_workers} workers: they read the samples, but slow_prepare still runs "
                "in the main process, on every batch"
            )
        elif job.num_workers:
            hint = "workers read the samples, but the slow part runs in the main process, on every batch"
        else:
            hint = "time the loop's parts: which one takes most of each step?"
        return verdict(False, "", f"measured {ratio:.1f}x less main-process CPU, {SPEEDUP:g}x needed: {hint}.")
    return verdict(
        True,
        f"at least {SPEEDUP:g}x less main-process CPU per sample, the same {samples} samples and rows, "
        f"accuracy {accuracy:.1f}% (original {reference:.1f}%).",
        "",
    )
