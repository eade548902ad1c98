"""Checker of chapter 10's exercise: the bytes one rank sends in one step of a layout, predicted by the
learner and measured in the simulation (`helpers.scale.simulate`), never compared with a formula of ours."""

from __future__ import annotations

import math
from typing import Any

from helpers.checks.core import Verdict, verdict

__all__ = ["predicted_sent", "layout_choice", "EXERCISE", "CHOICE"]

EXERCISE = {"layout": "HSDP", "world_size": 256}  # mesh (32 replicas, 8 shards)
TOLERANCE = 0.001  # relative
# exercise 2: a 29-billion-parameter stack on 16 devices of 80 GiB (2 machines of 8), 4,096 tokens per rank
CHOICE = {"world_size": 16, "hidden": 12288, "layers": 24, "batch": 4096, "device_gib": 80.0, "machine": 8}

_measured: dict[tuple[str, int], dict[str, Any]] = {}


def _measure(layout: str, world_size: int) -> dict[str, Any]:
    """The simulated step's bytes sent per rank, by kind, and psi (cached: the simulation is deterministic)."""
    from helpers import scale

    key = (layout, world_size)
    if key not in _measured:
        run = scale.simulate(layout, world_size)
        kinds = scale.by_kind(run["calls"])
        _measured[key] = {
            "sent": sum(row["sent"] for row in kinds.values()),
            "kinds": kinds,
            "psi": 4 * scale.parameter_count(),
            "mesh": run["mesh"],
        }
    return _measured[key]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TOLERANCE * abs(b)


def _hint(guess: float, m: dict[str, Any]) -> str:
    """Name what the guess most likely left out or added, from the measured parts of the step."""
    psi = m["psi"]
    replicas, shards = m["mesh"]
    kinds = m["kinds"]
    within = kinds["all-gather"]["sent"] + kinds["reduce-scatter"]["sent"]
    across = kinds["all-reduce"]["sent"]
    world = replicas * shards
    if _close(guess, within):
        return (
            "that is the traffic inside the shard group only; the replicas must also agree on the "
            "gradients: an all-reduce of this rank's gradient shard across the 32 groups."
        )
    if _close(guess, 3 * psi * (world - 1) / world) or _close(guess, 3 * psi * (world - 1) / world + across):
        return (
            "that is FSDP over all 256 ranks; HSDP gathers and reduce-scatters within its shard group "
            "of 8 only (mesh (32, 8))."
        )
    if _close(guess, 3 * psi) or _close(guess, 3 * psi + 2 * psi / shards):
        return "each rank sends (g - 1) / g of a tensor in an all-gather or reduce-scatter over g ranks, not all of it."
    if _close(guess, within + 2 * psi * (replicas - 1) / replicas):
        return (
            "across the replicas a rank all-reduces only its own shard of the gradients (psi / 8), not the whole psi."
        )
    if _close(guess, 2 * psi * (world - 1) / world) or _close(guess, 2 * psi):
        return "that is DDP's all-reduce; HSDP shards the parameters, so it gathers them before it uses them."
    if guess < within:
        return (
            "too little: inside the shard group, FSDP all-gathers the parameters in the forward, again "
            "in the backward, and reduce-scatters the gradients."
        )
    return (
        "too much: count FSDP's three collectives within the group of 8, plus one all-reduce of a "
        "gradient shard across the replicas, each with the ring's (g - 1) / g."
    )


def predicted_sent(guess: Any) -> Verdict:
    """Is `guess` the bytes one rank sends in one step of HSDP at 256 ranks, within 0.1 % of the simulation?"""
    if isinstance(guess, bool) or not isinstance(guess, (int, float)):
        return verdict(False, "", f"my_sent must be a number of bytes (an int or a float), got {type(guess).__name__}.")
    if not math.isfinite(guess) or guess <= 0:
        return verdict(
            False, "", "write my_sent as a positive number of bytes (in terms of psi), then run this cell again."
        )
    m = _measure(EXERCISE["layout"], EXERCISE["world_size"])
    ok = _close(float(guess), m["sent"])
    praise = (
        f"the simulation's step sends {m['sent']:,.0f} bytes per rank ({m['sent'] / m['psi']:.4f} psi): "
        "FSDP's 3 x within 8 ranks plus the replicas' all-reduce of a shard."
    )
    return verdict(ok, praise, _hint(float(guess), m) if not ok else "")


def layout_choice(layout: Any) -> Verdict:
    """Does `layout` fit `CHOICE`'s model in 80 GiB per device (measured: the simulation's state per rank),
    keep tensor parallelism's per-layer all-reduces inside a machine (measured: their group), and send the
    fewest bytes per step of the layouts that do (the simulation's bytes against the calculator's for the
    others, which tests/test_scale.py checks equal to the simulation)?"""
    from helpers import scale

    if not isinstance(layout, str):
        return verdict(False, "", f"my_layout must be the name of a layout (a str), got {type(layout).__name__}.")
    if not layout:
        return verdict(False, "", "set my_layout to one of the layout names, then run this cell again.")
    if layout not in scale.ALL_LAYOUTS:
        return verdict(False, "", f"my_layout must be one of {', '.join(scale.ALL_LAYOUTS)}; got {layout!r}.")
    c = CHOICE
    size = {"hidden": c["hidden"], "layers": c["layers"], "batch": c["batch"]}
    run = scale.simulate(layout, c["world_size"], **size)
    held = run["held"]["parameters"] + run["held"]["gradients"] + run["held"]["optimizer"]
    budget = c["device_gib"] * 2**30
    if held > budget:
        return verdict(False, "", f"{layout} holds {held / 2**30:.0f} GiB per rank of parameters, gradients and "
                       f"Adam state: more than {c['device_gib']:.0f} GiB. Shard more of it.")  # fmt: skip
    activation = scale.activation_bytes(c["hidden"], c["batch"])
    crossing = [
        g for kind, g, nbytes in run["calls"] if kind == "all-reduce" and nbytes == activation and g > c["machine"]
    ]
    if crossing:
        hint = (
            f"{layout} all-reduces activations between every layer over {crossing[0]} ranks, across "
            "machines: keep tensor parallelism inside a machine of 8 (fast links)."
        )
        return verdict(False, "", hint)
    sent = sum(row["sent"] for row in scale.by_kind(run["calls"]).values())
    better = []
    for other in scale.ALL_LAYOUTS:
        row = scale.calculator(other, c["world_size"], device_gib=c["device_gib"], **size)
        tp_over = other == "TP" and c["world_size"] > c["machine"]
        if row["fits"] and not tp_over and row["sent GiB per step"] * 2**30 < sent * (1 - TOLERANCE):
            better.append(other)
    if better:
        return verdict(False, "", f"{layout} fits ({held / 2**30:.0f} GiB per rank) but sends {sent / 2**30:.0f} GiB "
                       f"per step; another layout that fits sends less. Which one moves only a slice of the "
                       "parameters across machines?")  # fmt: skip
    return verdict(True, f"{layout} holds {held / 2**30:.0f} GiB per rank and sends {sent / 2**30:.0f} GiB per step, "
                   "the least of the layouts that fit with tensor parallelism inside a machine.", "")  # fmt: skip
