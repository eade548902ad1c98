"""Checkers for notebook 05 (torch.distributed and DDP on CPU).

Each checker measures the exercise's goal itself: `average_gradients` runs the learner's function in
three ranks and compares every rank's gradients with one process on the whole batch; `sampler_epochs`
runs the learner's loop for two ranks and checks what a training loop needs of its epochs (the ranks
share out the data set between them in every epoch, and each epoch deals it out anew)."""

from __future__ import annotations

from typing import Any

from helpers.checks.core import Verdict, not_ready, verdict

__all__ = ["average_gradients", "sampler_epochs"]

WORLD_SIZE = 3  # not 2: a hard-coded "/ 2" must not pass for "/ dist.get_world_size()" (and a 2-rank rerun
# refuses "/ 3")


def _average_rank(rank: int, world_size: int, average: Any = None) -> dict[str, Any]:
    """In each rank: the learner's averaging against one process on the full batch, and against the
    gradients a few typical mistakes leave (the rank's own, their sum, the sum over 2)."""
    import torch

    from helpers.distributed import ddp_gradients, make_model
    from helpers.launcher import describe_error

    try:
        got, full = ddp_gradients(rank, world_size, average=average)
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        error = describe_error(exc)  # one stable line, without addresses or ports
        if "lost" in error:
            error += ": another rank left or skipped a collective; every rank must make the same calls"
        return {"error": error}
    local, _ = ddp_gradients(rank, world_size, average=lambda model: None)

    def close(a: Any, b: Any) -> bool:
        return bool(torch.allclose(a, b, atol=1e-6))

    sizes = [p.numel() for p in make_model().parameters()]
    per_param = [close(g, f) for g, f in zip(got.split(sizes), full.split(sizes), strict=True)]
    return {
        "error": "",
        "full": close(got, full),
        "some parameters": any(per_param) and not all(per_param),
        "local": close(got, local),
        "local divided": close(got, local / world_size),
        "sum": close(got, full * world_size),
        "sum over 2": close(got, full * world_size / 2),
        "gradient": [round(g, 5) for g in got.tolist()],
    }


def _average_rows(fn: Any, world_size: int) -> list[dict[str, Any]] | Verdict:
    """Each rank's `_average_rank` report from `world_size` forked ranks, or the verdict if they failed."""
    from helpers.launcher import describe_error, launch

    try:
        results = launch(
            [_average_rank], world_size, start_method="fork", kwargs={"_average_rank": {"average": fn}}, timeout=60
        )
    except Exception as exc:  # noqa: BLE001 - a rank may die or hang on a wrong collective
        return verdict(
            False, "", f"the ranks failed: {describe_error(exc)}. Every rank must call the same collectives."
        )
    rows = [results[r]["_average_rank"] for r in sorted(results)]
    if any(row["error"] for row in rows):
        return verdict(False, "", f"your function raised {next(row['error'] for row in rows if row['error'])}")
    return rows


def average_gradients(fn: Any) -> Verdict:
    """Exercise: `fn(model)` turns each rank's gradients into the average over all ranks (what DDP does
    in backward), so one step equals one process on the concatenated batch. Runs 3 forked ranks, then 2
    (a divisor typed in, "/ 3", must not pass for "/ dist.get_world_size()")."""
    if fn is not None and not callable(fn):
        return verdict(False, "", f"my_average_gradients must be a function (model) -> None, not {type(fn).__name__}.")
    if (unready := not_ready(fn, "my_average_gradients", "(model) -> None")) is not None:
        return unready
    rows = _average_rows(fn, WORLD_SIZE)
    if isinstance(rows, Verdict):
        return rows
    if all(row["full"] for row in rows):
        again = _average_rows(fn, 2)
        if isinstance(again, Verdict):
            return again
        if not all(row["full"] for row in again):
            return verdict(
                False, "", f"right with {WORLD_SIZE} ranks, wrong with 2: divide by dist.get_world_size(), not by "
                "a number typed in.",
            )  # fmt: skip
        return verdict(
            True, f"all {WORLD_SIZE} ranks, then 2, now hold the gradient of the full batch, as with DDP.", ""
        )
    if all(row["sum"] for row in rows):
        return verdict(False, "", "that is the sum over ranks: divide by dist.get_world_size().")
    if all(row["sum over 2"] for row in rows):
        return verdict(
            False, "", f"that is the sum divided by 2, with {WORLD_SIZE} ranks: divide by dist.get_world_size()."
        )
    if all(row["local"] for row in rows):
        return verdict(False, "", "each rank still has its own gradients: all_reduce each p.grad itself (in place).")
    if all(row["local divided"] for row in rows):
        return verdict(False, "", "each rank divided its own gradients, but summed nothing: all_reduce p.grad first.")
    if any(row["some parameters"] for row in rows):
        return verdict(False, "", "some parameters are averaged and others not: loop over every parameter.")
    if all(row["gradient"] == rows[0]["gradient"] for row in rows):
        return verdict(
            False, "", "the ranks agree now, but not on the average: sum with all_reduce (op SUM, the default), "
            "then divide by dist.get_world_size().",
        )  # fmt: skip
    return verdict(False, "", "all_reduce every parameter's .grad with SUM, then divide it by the world size.")


def _epochs_of(fn: Any, rank: int, epochs: int) -> Any:
    """What the learner's `fn` returns for rank `rank` of 2 (10 samples, shuffled, seed 0), as lists of ints,
    or a str naming what is wrong with it."""
    import operator

    from torch.utils.data import DistributedSampler

    from helpers.errors import short_error

    sampler = DistributedSampler(range(10), num_replicas=2, rank=rank, shuffle=True, seed=0)
    try:
        got = fn(sampler, epochs)
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        return f"your function raised {short_error(exc)}"
    try:
        orders = [list(order) for order in got]
    except TypeError:
        return f"return a list of {epochs} lists, one per epoch, each with that epoch's indices."

    def index(i: Any) -> bool:
        try:
            operator.index(i)  # an int, or a 0-d integer tensor
        except TypeError:
            return False
        return not isinstance(i, bool)

    if len(orders) != epochs or not all(all(index(i) for i in order) for order in orders):
        return f"return one list of ints per epoch ({epochs} lists): sampler.set_epoch(epoch), then list(sampler)."
    return [[operator.index(i) for i in order] for order in orders]


def sampler_epochs(fn: Any) -> Verdict:
    """Exercise: `fn(sampler, epochs)` returns the index order of each epoch as a training loop sees it.
    What the loop needs: in every epoch the ranks share out the whole data set between them (no sample
    twice, none missed, so every rank must be in the same epoch), and each epoch deals it out anew (a
    rank gets other samples, not only the same ones in another order)."""
    if fn is not None and not callable(fn):
        return verdict(False, "", f"my_epochs must be a function (sampler, epochs), not {type(fn).__name__}.")
    if (unready := not_ready(fn, "my_epochs", "(sampler, epochs) -> list of lists", needs_fork=False)) is not None:
        return unready
    epochs = 3
    ranks = [_epochs_of(fn, rank, epochs) for rank in (0, 1)]
    if problem := next((r for r in ranks if isinstance(r, str)), None):
        return verdict(False, "", problem)
    first, second = ranks
    for epoch in range(epochs):
        a, b = first[epoch], second[epoch]
        if len(a) != 5 or len(b) != 5 or sorted(a + b) != list(range(10)):
            return verdict(
                False, "",
                f"in epoch {epoch} the two ranks' lists do not share out the 10 samples (overlap or gaps): every "
                "rank must call sampler.set_epoch with the same epoch number and use the order the sampler gives.",
            )  # fmt: skip
    if all(order == first[0] for order in first):
        return verdict(False, "", "every epoch has the same order: call sampler.set_epoch(epoch) before list(sampler).")
    if any(first[e] == first[e + 1] for e in range(epochs - 1)):
        return verdict(
            False, "", "two epochs in a row have the same order: call sampler.set_epoch(epoch) *before* iterating."
        )
    if all(sorted(order) == sorted(first[0]) for order in first):
        return verdict(
            False, "",
            "each rank sees the same samples every epoch, only reordered: let the sampler deal them out anew "
            "with sampler.set_epoch(epoch) and use its order.",
        )  # fmt: skip
    return verdict(True, "a new share of the data every epoch, and the ranks agree on it.", "")
