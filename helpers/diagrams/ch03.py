"""Pictures of notebook 03: Hogwild's processes around one shared model, and what a collision is."""

from __future__ import annotations

from helpers.diagrams import animation, figure
from helpers.diagrams.style import FONT, arrow, box, canvas, note


@figure(
    "03-hogwild-overview",
    alt="Two processes around one model in shared memory: each has its own optimizer, data order and private "
    "gradients, reads the shared parameters for its forward pass and writes its update into them without a lock",
)
def hogwild_overview():
    fig, ax = canvas(8, 4.2)
    box(ax, 2.9, 2.5, 2.2, 1.3, "", "shared")
    note(ax, 4.0, 3.5, "the model's parameters", size=FONT - 1, weight="bold")
    note(ax, 4.0, 3.1, "in shared memory", "shared", size=FONT - 1)
    note(ax, 4.0, 2.75, "model.share_memory()", size=FONT - 2)
    box(ax, 3.0, 1.2, 2.0, 0.7, "step counter\n+ its lock", "system", size=FONT - 2)
    for x, rank in ((0.1, 0), (6.1, 1)):
        box(ax, x, 0.3, 1.8, 3.5, f"process {rank}", "process", align="top", weight="bold")
        box(ax, x + 0.1, 2.55, 1.6, 0.45, "own optimizer", "data", size=FONT - 2)
        box(ax, x + 0.1, 1.95, 1.6, 0.45, "own data order", "data", size=FONT - 2)
        box(ax, x + 0.1, 1.35, 1.6, 0.45, "private gradients", "data", size=FONT - 2)
        box(ax, x + 0.1, 0.5, 1.6, 0.6, "1 torch thread", "thread", size=FONT - 2)
    arrow(ax, (2.9, 3.45), (1.9, 3.45), "read", "shared", label_offset=(0.0, 0.05))
    arrow(ax, (1.9, 2.75), (2.9, 2.75), "write,\nno lock", "shared", label_offset=(0.0, -0.55), size=FONT - 2)
    arrow(ax, (5.1, 3.45), (6.1, 3.45), "read", "shared", label_offset=(0.0, 0.05))
    arrow(ax, (6.1, 2.75), (5.1, 2.75), "write,\nno lock", "shared", label_offset=(0.0, -0.55), size=FONT - 2)
    arrow(ax, (1.9, 1.55), (3.0, 1.55), "", "system", both=True)
    arrow(ax, (6.1, 1.55), (5.0, 1.55), "", "system", both=True)
    note(ax, 4.0, 0.75, "claim a step under the lock", "system", size=FONT - 2)
    return fig


# (what P0 and P1 do, rows of w each touches, rows coloured as changed, caption)
_STEPS = [
    ("", "", set(), set(), "Dense model: every step reads and writes all rows of w, kept in shared memory."),
    ("reads w", "", set(range(8)), set(), "Process 0 reads w and computes its gradient g0 from it."),
    ("computing g0", "reads w", set(range(8)), set(), "Process 1 reads the same w, before process 0 has written."),
    ("writes w - lr g0", "computing g1", set(range(8)), set(range(8)), "Process 0 writes its update into w."),
    ("", "writes w - lr g1", set(range(8)), set(range(8)),
     "Process 1 writes an update computed from the old w: a collision. SGD tolerates a slightly stale step."),
    ("rows 1, 5", "rows 3, 6", {1, 5}, {3, 6},
     "Sparse model: a step touches a few rows. Two steps at once rarely share one: no collision here."),
]  # fmt: skip


@animation(
    "03-collision",
    alt="Two Hogwild processes updating the rows of one shared weight: in a dense model both read the same "
    "weights and the second write uses a gradient from the old weights, a collision; in a sparse model their "
    "steps touch different rows and do not collide",
    steps=len(_STEPS),
)
def collision(step: int):
    fig, ax = canvas(8, 3.6)
    left, right, touched0, touched1, caption = _STEPS[step]
    sparse = step == len(_STEPS) - 1
    note(ax, 4.0, 3.35, "shared weight w, 8 rows", "shared", size=FONT)
    for row in range(8):
        hit0, hit1 = row in touched0, row in touched1
        kind = "blocked" if hit0 and hit1 and step == 4 else "data" if hit0 or hit1 else "shared"
        box(ax, 1.6 + 0.6 * row, 2.5, 0.55, 0.6, str(row), kind, size=FONT - 1)
    for x, rank, action, rows in ((0.3, 0, left, touched0), (5.2, 1, right, touched1)):
        box(ax, x, 0.75, 2.5, 0.9, f"process {rank}\n{action}", "process", size=FONT - 1)
        if action.startswith(("reads", "writes")) or (sparse and action):
            # sparse: one arrow per row it writes; dense: one arrow to the middle of w (it touches every row)
            targets = [1.6 + 0.6 * row + 0.27 for row in sorted(rows)] if sparse else [3.6 if rank == 0 else 4.4]
            for target in targets:
                writing = "writes" in action or sparse
                start, end = (x + 1.25, 1.65), (target, 2.5)
                arrow(ax, start if writing else end, end if writing else start, "", "shared")
    note(ax, 4.0, 0.3, caption, size=FONT - 1)
    return fig
