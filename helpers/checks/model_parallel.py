"""Checkers for notebook 09 (model, pipeline and tensor parallelism, sharded data parallel)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from helpers.checks.core import Verdict, fork_or_none, verdict

__all__ = ["bytes_per_rank", "pipeline_split", "tensor_parallel_plan", "tp_verdict", "KINDS", "WAYS"]

WAYS = ("DDP", "ZeRO-1", "FSDP")
KINDS = ("parameters", "gradients", "optimizer")
TOLERANCE = 0.01  # a prediction within 1 % of the measured mean per rank (Adam's 0-d step counters are extra)
MICROBATCHES = 4  # exercise 1: GPipe with 4 micro-batches on 2 stages
MARGIN = 0.03  # exercise 1: the bubble within 3 points of the balanced optimum (p - 1) / (m + p - 1)


def _measured(measured: Any) -> dict[str, dict[str, float]]:
    """The mean bytes per rank of each way and kind, from the notebook's launch of `sharded`."""
    if not isinstance(measured, Mapping) or not measured:
        raise TypeError("measured must be the launch's results {rank: {'sharded': ...}} of section 5")
    rows = [measured[r]["sharded"] if "sharded" in measured[r] else measured[r] for r in sorted(measured)]
    return {way: {kind: statistics.mean(row[f"{way} bytes"][kind] for row in rows) for kind in KINDS} for way in WAYS}


def bytes_per_rank(answer: Any, measured: Any) -> Verdict:
    """Exercise: `answer` predicts the bytes each rank holds of parameters, gradients and optimizer state
    under DDP, ZeRO-1 and FSDP with 2 ranks ({way: {kind: bytes}}). Compared with the mean per rank of the
    numbers measured in section 5 (ZeRO-1 shares out whole tensors, so its ranks differ a little)."""
    if answer is None:
        return verdict(False, "", "fill in my_bytes, then run this cell again.")
    if not isinstance(answer, Mapping):
        raise TypeError(f"answer must be a dict {{way: {{kind: bytes}}}}, got {type(answer).__name__}")
    truth = _measured(measured)
    for way in WAYS:
        row = answer.get(way)
        if not isinstance(row, Mapping) or any(not isinstance(row.get(kind), (int, float)) for kind in KINDS):
            return verdict(False, "", f"my_bytes[{way!r}] needs a number for each of {', '.join(KINDS)}.")
    wrong = [
        (way, kind)
        for way in WAYS
        for kind in KINDS
        if abs(answer[way][kind] - truth[way][kind]) > TOLERANCE * truth[way][kind]
    ]
    if not wrong:
        return verdict(True, "every prediction is within 1 % of the bytes measured per rank.", "")
    way, kind = wrong[0]
    got, want = answer[way][kind], truth[way][kind]
    ratio = f"{got / want:.2g}x the measured value" if want else "not the measured value"
    return verdict(False, "", f"{way} {kind}: your {got:,.0f} bytes is {ratio}. {_bytes_hint(way, kind, got, want)}")


SHARDED = {"DDP": (), "ZeRO-1": ("optimizer",), "FSDP": KINDS}  # what each way shards over the ranks


def _bytes_hint(way: str, kind: str, got: float, want: float) -> str:
    """A hint chosen by the direction of the error: twice the truth means the learner forgot a sharding,
    half means they sharded what is whole here, or (optimizer) counted one of Adam's two moments."""
    ratio = got / want if want else 0.0
    if abs(ratio - 2) <= 0.1:
        return f"{way} shards them over the 2 ranks: each rank holds half."
    if abs(ratio - 0.5) <= 0.05:
        if kind == "optimizer":
            return "Adam keeps two moments per parameter (exp_avg and exp_avg_sq), each as large as the parameters."
        if kind in SHARDED[way]:
            return f"{way} shards them over 2 ranks: a shard is a half, not less."
        return f"{way} does not shard the {kind}: every rank holds all of them."
    if ratio and kind in SHARDED[way] and abs(ratio - 0.25) <= 0.03:
        return f"{way} shards them over 2 ranks: a shard is a half, not less."
    return {
        "parameters": "4 bytes per float32 parameter; which way shards the parameters themselves?",
        "gradients": "one gradient per parameter; ZeRO-1 shards only the optimizer state.",
        "optimizer": "Adam keeps two moments per parameter (exp_avg and exp_avg_sq).",
    }[kind]


def pipeline_split(split: Any) -> Verdict:
    """Exercise: `split` (the number of layers of stage 0) cuts `UNBALANCED` into 2 pipeline stages; the
    bubble of GPipe with 4 micro-batches, from each stage's work counted in floating-point operations,
    must come within 3 points of the balanced optimum. Counting, not timing, on purpose: the same verdict
    on a busy machine as on an idle one (`helpers.model_parallel.time_split` times a split beside it)."""
    from helpers.model_parallel import UNBALANCED, bubble_formula, gpipe_bubble, stage_flops

    if split is None:
        return verdict(False, "", "set my_split, then run this cell again.")
    try:
        flops = stage_flops(UNBALANCED, split)
    except (TypeError, ValueError) as exc:
        return verdict(False, "", str(exc))
    bubble = gpipe_bubble(flops, MICROBATCHES)
    best = bubble_formula(2, MICROBATCHES)
    share = flops[0] / sum(flops)
    if bubble <= best + MARGIN:
        return verdict(
            True,
            f"bubble {bubble:.3f} from counted FLOPs, optimum {best:.3f}: stage 0 does {share:.0%} of the work.",
            "",
        )
    more = "more" if flops[0] < flops[1] else "fewer"
    return verdict(
        False,
        "",
        f"bubble {bubble:.3f} from counted FLOPs, optimum {best:.3f}: stage 0 does {share:.0%} of the work; "
        f"give it {more} layers "
        "(the last two layers are wider: count their work, not their number).",
    )


def tp_verdict(row: Mapping[str, Any]) -> Verdict:
    """The verdict on one run of `tensor_parallel` with a learner's plan (a pure function, so that tests can
    judge many runs of one process group)."""
    if row.get("error"):
        return verdict(False, "", f"the plan fails in torch: {row['error']}. Which layer's input is sharded?")
    if not (row["output equal"] and row["gradients equal"]):
        return verdict(False, "", "the output or the gradients differ from the block in one process.")
    if row["weight bytes here"] >= row["weight bytes whole"]:
        return verdict(False, "", "nothing is sharded: each rank holds the whole block. Give both layers a style.")
    forward = row["forward collectives"]
    if forward != {"all_reduce": 1}:
        return verdict(
            False, "", f"right output, but the forward ran {forward}: Megatron's pairing needs one all-reduce."
        )
    return verdict(True, "same output and gradients as one process, one all-reduce in forward, half the weights.", "")


def tensor_parallel_plan(plan: Any) -> Verdict:
    """Exercise: `plan` ({"up": style, "down": style}) splits `Block` over 2 ranks so that its output and
    gradients equal the single process with one all-reduce in forward. Runs 2 forked ranks (fork carries
    styles made in a notebook without pickling)."""
    if plan is None:
        return verdict(False, "", "write my_plan, then run this cell again.")
    if not isinstance(plan, Mapping):
        raise TypeError(f"plan must be a dict of layer name -> style, got {type(plan).__name__}")
    if fork_or_none() is None:
        return verdict(False, "", "this checker needs the fork start method (Linux or macOS).")
    from helpers.launcher import describe_error
    from helpers.model_parallel import launch, tensor_parallel

    try:
        results = launch([tensor_parallel], 2, start_method="fork", kwargs={"tensor_parallel": {"plan": dict(plan)}})
    except Exception as exc:  # noqa: BLE001 - a plan may break the group
        return verdict(False, "", f"the ranks failed: {describe_error(exc)}")
    verdicts = [tp_verdict(results[r]["tensor_parallel"]) for r in sorted(results)]
    return next((v for v in verdicts if not v), verdicts[0])
