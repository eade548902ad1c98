"""Checkers for notebook 09 (model, pipeline and tensor parallelism, sharded data parallel)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from helpers.checks.core import Verdict, fork_or_none, verdict

__all__ = ["bytes_per_rank", "pipeline_split", "tensor_parallel_plan", "tp_verdict", "KINDS", "WAYS"]

WAYS = ("DDP", "ZeRO-1", "FSDP")
KINDS = ("parameters", "gradients", "optimizer")
RANKS = 2  # exercise 3: the measurement of section 5 ran on 2 ranks
MICROBATCHES = 4  # exercise 1: GPipe with 4 micro-batches on 2 stages
MARGIN = 0.03  # exercise 1: the bubble within 3 points of the balanced optimum (p - 1) / (m + p - 1)
TP_MODULE = "Stack"  # exercise 2: the model the learner's plan splits (section 4 shows `Block`)


# --------------------------------------------------------------------------------- exercise 3: bytes
def _measured(measured: Any) -> dict[str, dict[str, list[int]]]:
    """The bytes each rank held, per way and kind, from section 5's launch of `sharded`; the optimizer's
    without Adam's 0-d step counters (the exercise leaves them out)."""
    if not isinstance(measured, Mapping) or sorted(measured) != list(range(RANKS)):
        raise TypeError("measured must be section 5's launch results {rank: {'sharded': ...}} of 2 ranks")
    rows = [measured[r]["sharded"] if "sharded" in measured[r] else measured[r] for r in range(RANKS)]
    key = {"parameters": "parameters", "gradients": "gradients", "optimizer": "optimizer moments"}
    return {way: {kind: [row[f"{way} bytes"][key[kind]] for row in rows] for kind in KINDS} for way in WAYS}


def _per_rank(value: Any) -> list[float] | None:
    """A prediction as one number per rank: a number (the same on every rank) or one number per rank."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [value] * RANKS
    numbers = isinstance(value, Sequence) and not isinstance(value, str) and len(value) == RANKS
    if numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def bytes_per_rank(answer: Any, measured: Any) -> Verdict:
    """Exercise 3: `answer` predicts the bytes each rank holds of parameters, gradients and Adam's moments
    under DDP, ZeRO-1 and FSDP with 2 ranks ({way: {kind: bytes, or [rank 0, rank 1]}}). Bytes are exact,
    so each rank's prediction must equal what that rank held in section 5's run."""
    if answer is None:
        return verdict(False, "", "fill in my_bytes, then run this cell again.")
    if not isinstance(answer, Mapping):
        return verdict(False, "", f"my_bytes must be a dict {{way: {{kind: bytes}}}}, not a {type(answer).__name__}.")
    truth = _measured(measured)
    for way in WAYS:
        row = answer.get(way)
        if not isinstance(row, Mapping):
            return verdict(False, "", f"my_bytes[{way!r}] must be a dict with {', '.join(KINDS)}.")
        for kind in KINDS:
            if _per_rank(row.get(kind)) is None:
                return verdict(
                    False,
                    "",
                    f"my_bytes[{way!r}][{kind!r}] must be a number of bytes (the same on both ranks) or a list "
                    f"of 2 numbers (rank 0, rank 1), got {row.get(kind)!r}.",
                )
    for way in WAYS:
        for kind in KINDS:
            got, want = _per_rank(answer[way][kind]), truth[way][kind]
            for rank in range(RANKS):
                if got[rank] != want[rank]:
                    hint = _bytes_hint(way, kind, got, want, rank, truth)
                    return verdict(
                        False,
                        "",
                        f"{way} {kind}, rank {rank}: you predicted {got[rank]:,.0f} bytes, "
                        f"it held {want[rank]:,}. {hint}",
                    )
    return verdict(True, "every prediction equals the bytes each rank held, to the byte.", "")


SHARDED = {"DDP": (), "ZeRO-1": ("optimizer",), "FSDP": KINDS}  # what each way shards over the ranks


def _bytes_hint(
    way: str, kind: str, got: list[float], want: list[int], rank: int, truth: dict[str, dict[str, list[int]]]
) -> str:
    """A hint that names the reason: the direction and size of the error, and what the way shards."""
    mine, true = got[rank], want[rank]
    whole = truth["DDP"]["parameters"][0]  # psi: the parameter bytes of the whole model
    if kind == "optimizer" and 0 < mine - true <= 4 * 6:
        return "A few bytes too many: leave out Adam's 0-d step counters (4 bytes a tensor)."
    if way == "ZeRO-1" and kind == "optimizer":
        if abs(got[0] - got[1]) <= 0.01 * whole:
            return (
                "ZeRO-1 here (torch's ZeroRedundancyOptimizer) does not cut tensors in halves: it gives each parameter "
                "tensor's whole state to one rank, largest tensor first, each to the rank that holds less so far. "
                "List the six tensors' sizes and share them out."
            )
        if sum(got) == sum(want):
            return "Together right, but which rank holds which tensors' state?"
    if true and 0.97 <= mine / true < 1:
        return "A little short: count every parameter, the biases too (the printed count includes them)."
    if true and abs(mine / true - 2) <= 0.1:
        return f"{way} shards the {kind} over the 2 ranks: each rank holds half."
    if true and abs(mine / true - 0.5) <= 0.05:
        if kind == "optimizer":
            return "Adam keeps two moments per parameter (exp_avg and exp_avg_sq), each as large as the parameters."
        if kind in SHARDED[way]:
            return f"{way} shards them over 2 ranks: a shard is a half, not less."
        return f"{way} does not shard the {kind}: every rank holds all of them."
    if true and abs(mine / true - 0.25) <= 0.03:
        return f"{way} shards them over 2 ranks: a shard is a half, not a quarter."
    if kind == "parameters":
        return f"4 bytes per float32 parameter; the model has {whole // 4:,} parameters. Does {way} shard them?"
    if kind == "gradients":
        return f"One float32 gradient per parameter. Does {way} shard the gradients?"
    return "Adam keeps two moments per parameter (exp_avg and exp_avg_sq), 4 bytes each; leave out the step counters."


# --------------------------------------------------------------------------------- exercise 1: split
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


# ---------------------------------------------------------------------------------- exercise 2: plan
def tp_verdict(row: Mapping[str, Any]) -> Verdict:
    """The verdict on one run of `tensor_parallel` with a learner's plan (a pure function, so that tests can
    judge many runs of one process group). The goal, measured: the module's output and gradients equal
    one process's, every Linear layer's weight is sharded (the bytes held say how much), and the forward
    and the backward each run one all-reduce per column-then-row pair and no other collective."""
    if row.get("error"):
        return verdict(
            False,
            "",
            f"torch refused the plan: {str(row['error']).rstrip('.')}. A layer after a column-wise one receives "
            "half of the features: which style reads a sharded input?",
        )
    if not (row["output equal"] and row["gradients equal"]):
        return verdict(False, "", "the output or the gradients differ from the module in one process.")
    share = row["weight bytes here"] / row["weight bytes whole"]
    whole = [name for name in row["layers"] if name not in row["sharded layers"]]
    if whole:
        return verdict(
            False,
            "",
            f"{', '.join(whole)} {'is' if len(whole) == 1 else 'are'} whole on every rank: each rank holds "
            f"{share:.2f} of the weight bytes. Give every layer a style.",
        )
    pairs = len(row["layers"]) // 2
    want = {"all_reduce": pairs}
    for phase in ("forward", "backward"):
        ran = row[f"{phase} collectives"]
        if ran != want:
            extra = " (an all-gather: some activation was gathered whole)" if any("gather" in op for op in ran) else ""
            return verdict(
                False,
                "",
                f"right output, every layer sharded, but the {phase} ran {ran}{extra}. Pair the layers column-wise "
                f"then row-wise: {pairs} all-reduce(s) in each direction and nothing else.",
            )
    return verdict(
        True,
        f"same output and gradients as one process; each rank holds {share:.3f} of the weight bytes; forward "
        f"{row['forward collectives']}, backward {row['backward collectives']}.",
        "",
    )


def tensor_parallel_plan(plan: Any) -> Verdict:
    """Exercise 2: `plan` ({layer name: style}) splits `Stack` over 2 ranks so that its output and gradients
    equal one process's, every layer is sharded, and each direction runs one all-reduce per pair. Runs 2
    forked ranks (fork carries styles made in a notebook without pickling)."""
    if plan is None:
        return verdict(False, "", "write my_plan, then run this cell again.")
    if not isinstance(plan, Mapping):
        return verdict(False, "", f"my_plan must be a dict {{layer name: style}}, not a {type(plan).__name__}.")
    from helpers.model_parallel import TP_MODULES

    names = {"fc1", "fc2", "fc3", "fc4"}
    assert names == {n for n, _ in TP_MODULES[TP_MODULE]().named_children()}
    unknown = sorted(str(k) for k in plan if k not in names)
    if unknown:
        return verdict(False, "", f"{', '.join(unknown)}: not a layer of mpar.Stack (its layers: fc1, fc2, fc3, fc4).")
    from torch.distributed.tensor.parallel import ParallelStyle

    styles = sorted(str(k) for k, v in plan.items() if not isinstance(v, ParallelStyle))
    if styles:
        return verdict(
            False, "", f"my_plan[{styles[0]!r}] must be a style: ColwiseParallel() or RowwiseParallel() (with the ())."
        )
    if fork_or_none() is None:
        return verdict(False, "", "this checker needs the fork start method (Linux or macOS).")
    from helpers.launcher import describe_error
    from helpers.model_parallel import launch, tensor_parallel

    kwargs = {"tensor_parallel": {"plan": dict(plan), "module": TP_MODULE}}
    try:
        results = launch([tensor_parallel], 2, start_method="fork", kwargs=kwargs)
    except Exception as exc:  # noqa: BLE001 - a plan may break the group
        return verdict(False, "", f"the ranks failed: {describe_error(exc)}")
    verdicts = [tp_verdict(results[r]["tensor_parallel"]) for r in sorted(results)]
    return next((v for v in verdicts if not v), verdicts[0])
