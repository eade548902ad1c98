"""Chapter 09's pictures: GPipe against 1F1B as micro-batches move through two stages (animated), the
column-then-row split of an MLP block (tensor parallelism), and FSDP's all-gather and reduce-scatter
around each layer."""

from __future__ import annotations

from matplotlib.patches import Rectangle

from helpers.diagrams import animation, figure
from helpers.diagrams.style import FONT, KINDS, arrow, box, canvas, lane, legend, note

__all__ = ["schedule", "pipeline_schedules", "column_then_row", "fsdp_layers"]

STAGES, MICRO = 2, 4  # the pictures' pipeline: 2 stages, 4 micro-batches, a forward and a backward of 1 slot each


def schedule(kind: str) -> dict[int, list[tuple[str, int, int]]]:
    """Each stage's (F or B, micro-batch, start slot) under GPipe or 1F1B (PipeDream-Flush): a forward
    needs the previous stage's forward of its micro-batch, a backward the next stage's backward (the
    last stage's, its own forward); a stage runs one thing at a time, in its schedule's order."""
    order = {}
    for s in range(STAGES):
        if kind == "GPipe":
            order[s] = [("F", i) for i in range(MICRO)] + [("B", i) for i in range(MICRO)]
        else:
            warm = STAGES - s - 1
            seq = [("F", i) for i in range(warm)]
            for i in range(MICRO - warm):
                seq += [("F", i + warm), ("B", i)]
            seq += [("B", i) for i in range(MICRO - warm, MICRO)]
            order[s] = seq
    done: dict[tuple[str, int, int], int] = {}
    placed: dict[int, list[tuple[str, int, int]]] = {s: [] for s in range(STAGES)}
    free = dict.fromkeys(range(STAGES), 0)
    pending = {s: list(order[s]) for s in range(STAGES)}
    while any(pending.values()):
        for s in range(STAGES):
            if not pending[s]:
                continue
            op, i = pending[s][0]
            if op == "F":
                need = [("F", s - 1, i)] if s else []
            else:
                need = [("B", s + 1, i)] if s < STAGES - 1 else [("F", s, i)]
            if all(n in done for n in need):
                start = max([free[s]] + [done[n] for n in need])
                done[(op, s, i)] = start + 1
                free[s] = start + 1
                placed[s].append((op, i, start))
                pending[s].pop(0)
    return placed


SLOTS = max(start + 1 for kind in ("GPipe", "1F1B") for ops in schedule(kind).values() for _, _, start in ops)


def _held(ops: list[tuple[str, int, int]], t: int) -> int:
    """Micro-batches whose activations a stage holds at the end of slot t: forwarded, not yet backwarded."""
    return sum(1 for op, _, start in ops if op == "F" and start <= t) - sum(
        1 for op, _, start in ops if op == "B" and start <= t
    )


@animation(
    "09-pipeline-schedules",
    alt="Two stages, four micro-batches: GPipe runs all four forwards, then all backwards, and stage 0 holds "
    "four micro-batches' activations; 1F1B starts each backward as soon as it can and holds at most two; "
    "both steps last ten slots, with the same idle bubble",
    steps=SLOTS + 1,
)
def pipeline_schedules(step: int):
    """Frame t shows slots 0..t-1 of both schedules; the last frame the whole step and the bubble."""
    fig, ax = canvas(8, 4.4)
    x0, w, h = 1.5, 0.58, 0.42
    edge, fill = KINDS["data"]
    for row, kind in enumerate(("GPipe", "1F1B")):
        top = 3.55 - row * 1.55
        note(ax, 0.1, top + 0.42, kind, ha="left", weight="bold", size=FONT)
        ops = schedule(kind)
        for s in range(STAGES):
            y = top - s * 0.55
            lane(ax, y - h / 2 + 0.02, h, f"stage {s}", x0, x0 + SLOTS * w)
            busy = {start for _, _, start in ops[s]}
            for t in range(min(step, SLOTS)):
                if t not in busy:  # nothing to do in this slot: the bubble
                    ax.add_patch(Rectangle((x0 + t * w + 0.02, y - h / 2), w - 0.04, h, facecolor="white",
                                           edgecolor=KINDS["idle"][0], linewidth=1.0, linestyle="--"))  # fmt: skip
            for op, i, start in ops[s]:
                if start >= step:
                    continue
                face, colour = (fill, "#222222") if op == "F" else (edge, "white")
                ax.add_patch(Rectangle((x0 + start * w + 0.02, y - h / 2), w - 0.04, h, facecolor=face,
                                       edgecolor=edge, linewidth=1.2))  # fmt: skip
                ax.text(x0 + (start + 0.5) * w, y, f"{op}{i}", ha="center", va="center", fontsize=FONT - 1,
                        color=colour)  # fmt: skip
            held = _held(ops[s], step - 1) if step else 0
            note(ax, x0 + SLOTS * w + 0.15, y, f"holds {held}", "data", ha="left", size=FONT - 1)
    if step == 0:
        caption = "one step, 4 micro-batches; F = forward, B = backward (one slot each)"
    elif step <= SLOTS - 1:
        caption = f"after {step} of {SLOTS} slots: at the right, the micro-batches whose activations each stage holds"
    else:
        caption = "both steps last 10 slots, each stage idle 2 of them: bubble (p-1)/(m+p-1) = 1/5;\n" \
                  "GPipe held up to 4 micro-batches on stage 0, 1F1B at most 2"  # fmt: skip
    note(ax, 4.0, 0.55, caption, size=FONT - 1)
    legend(ax, 1.5, 0.12, [("data", "forward (light) / backward (dark)"), ("idle", "idle: the bubble")])
    return fig


@figure(
    "09-column-then-row",
    alt="Tensor parallelism over 2 ranks: each rank multiplies the whole input by its half of up's rows, "
    "gets half of the hidden features, multiplies them by the matching half of down's columns, and one "
    "all-reduce adds the two partial outputs",
)
def column_then_row():
    fig, ax = canvas(8, 3.3)
    for r in range(2):
        y = 1.85 - r * 1.3
        box(ax, 0.2, y, 1.0, 0.7, "x\n(whole)", "data", size=FONT - 1)
        box(ax, 1.5, y, 1.45, 0.7, f"up: half {r + 1}\nof its outputs", "process", size=FONT - 1)
        box(ax, 3.25, y, 1.15, 0.7, f"h half {r + 1}\n+ ReLU", "data", size=FONT - 1)
        box(ax, 4.7, y, 1.55, 0.7, f"down: inputs of\nhalf {r + 1} only", "process", size=FONT - 1)
        for a, b in ((1.2, 1.5), (2.95, 3.25), (4.4, 4.7)):
            arrow(ax, (a, y + 0.35), (b, y + 0.35), kind="data")
        note(ax, 0.1, y + 0.85, f"rank {r}", "process", ha="left", size=FONT - 1, weight="bold")
        arrow(ax, (6.25, y + 0.35), (6.75, 1.55), kind="message")
    box(ax, 6.75, 1.2, 1.1, 0.7, "all-reduce\n(sum)", "message", size=FONT - 1)
    note(ax, 7.3, 0.85, "y, whole,\non each rank", "data", size=FONT - 1)
    note(ax, 3.3, 3.15, "column-wise (Shard(0) of up.weight), then row-wise (Shard(1) of down.weight):",
         size=FONT - 1)  # fmt: skip
    note(ax, 3.3, 0.2, "h, 4 times wider than x, never travels: one all-reduce of y per block", "message",
         size=FONT - 1)  # fmt: skip
    return fig


@figure(
    "09-fsdp-layers",
    alt="FSDP on one rank: before each layer's forward its parameters are all-gathered and freed after; in the "
    "backward they are all-gathered again, and each layer's gradients are reduce-scattered so that the rank "
    "keeps only its shard",
)
def fsdp_layers():
    fig, ax = canvas(8, 3.2)
    w, gap = 0.72, 0.06
    note(ax, 4.0, 3.0, "one rank of n: it keeps 1/n of every weight, gradient and optimizer state", size=FONT - 1)
    forward = [("gather\nW1", "message"), ("layer 1", "data"), ("gather\nW2", "message"),
               ("layer 2", "data"), ("gather\nW3", "message"), ("layer 3", "data")]  # fmt: skip
    backward = [("gather\nW3", "message"), ("back-\nward 3", "data"), ("scatter\ndW3", "message"),
                ("gather\nW2", "message"), ("back-\nward 2", "data"), ("scatter\ndW2", "message"),
                ("gather\nW1", "message"), ("back-\nward 1", "data"), ("scatter\ndW1", "message")]  # fmt: skip
    x0 = 0.98
    lane(ax, 1.95, 0.62, "forward", x0, x0 + 9 * (w + gap))
    lane(ax, 0.85, 0.62, "backward", x0, x0 + 9 * (w + gap))
    for i, (label, kind) in enumerate(forward):
        box(ax, x0 + i * (w + gap), 1.95, w, 0.62, label, kind, size=FONT - 2)
    for i, (label, kind) in enumerate(backward):
        box(ax, x0 + i * (w + gap), 0.85, w, 0.62, label, kind, size=FONT - 2)
    note(ax, 4.0, 2.75, "each layer's full weights exist only while it computes, then are freed", size=FONT - 2)
    legend(ax, 0.98, 0.4, [("message", "gather = all-gather, scatter = reduce-scatter"), ("data", "compute")])
    return fig
