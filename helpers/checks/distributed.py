"""Checkers for notebook 05 (torch.distributed and DDP on CPU)."""

from __future__ import annotations

from typing import Any

from helpers.checks.core import Verdict, not_ready, verdict

__all__ = ["average_gradients", "sampler_epochs"]


def _average_rank(rank: int, world_size: int, average: Any = None) -> dict[str, Any]:
    """In each rank: the learner's averaging against one process on the full batch and against the
    rank's own (not averaged) gradients."""
    import torch

    from helpers.distributed import ddp_gradients
    from helpers.errors import short_error

    try:
        got, full = ddp_gradients(rank, world_size, average=average)
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        return {"error": short_error(exc)}
    local, _ = ddp_gradients(rank, world_size, average=lambda model: None)
    return {
        "error": "",
        "full": torch.allclose(got, full, atol=1e-6),
        "local": torch.allclose(got, local, atol=1e-6),
        "sum": torch.allclose(got, full * world_size, atol=1e-6),
    }


def average_gradients(fn: Any) -> Verdict:
    """Exercise: `fn(model)` turns each rank's gradients into the average over all ranks (what DDP does
    in backward), so one step equals one process on the concatenated batch. Runs 2 forked ranks."""
    if (unready := not_ready(fn, "average_gradients", "(model) -> None")) is not None:
        return unready
    from helpers.launcher import launch

    try:
        results = launch([_average_rank], 2, start_method="fork", kwargs={"_average_rank": {"average": fn}})
    except Exception as exc:  # noqa: BLE001 - a rank may die or hang on a wrong collective
        from helpers.launcher import describe_error

        return verdict(False, "", f"the ranks failed: {describe_error(exc)}")
    rows = [results[r]["_average_rank"] for r in sorted(results)]
    if any(row["error"] for row in rows):
        return verdict(False, "", f"your function raised {next(row['error'] for row in rows if row['error'])}")
    if all(row["full"] for row in rows):
        return verdict(True, "every rank now holds the gradient of the full batch, as with DDP.", "")
    if all(row["sum"] for row in rows):
        return verdict(False, "", "that is the sum over ranks: divide by dist.get_world_size().")
    if all(row["local"] for row in rows):
        return verdict(False, "", "the gradients are unchanged: all_reduce each p.grad (in place).")
    return verdict(False, "", "all_reduce every parameter's .grad with SUM, then divide it by the world size.")


def sampler_epochs(fn: Any) -> Verdict:
    """Exercise: `fn(sampler, epochs)` returns the index order of each epoch, reshuffled every epoch the
    way `DistributedSampler` intends (the same on every rank for a given epoch)."""
    if (unready := not_ready(fn, "my_epochs", "(sampler, epochs) -> list of lists", needs_fork=False)) is not None:
        return unready
    from torch.utils.data import DistributedSampler

    from helpers.distributed import epoch_orders
    from helpers.errors import short_error

    sampler = DistributedSampler(range(10), num_replicas=2, rank=0, shuffle=True, seed=0)
    try:
        got = fn(sampler, 3)
    except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
        return verdict(False, "", f"your function raised {short_error(exc)}")
    got = [list(order) for order in got] if got is not None else None
    if got == epoch_orders(10, 3, set_epoch=True):
        return verdict(True, "a new order every epoch, and the same one on every rank for that epoch.", "")
    if got is not None and len(got) == 3 and all(order == got[0] for order in got):
        return verdict(False, "", "every epoch has the same order: call sampler.set_epoch(epoch) first.")
    return verdict(False, "", "return one list per epoch: call sampler.set_epoch(epoch), then list(sampler).")
