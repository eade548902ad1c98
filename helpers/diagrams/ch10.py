"""Chapter 10's pictures: a 2-D device mesh, what one rank holds under each layout, and what a step sends."""

from __future__ import annotations

from matplotlib.patches import Rectangle

from helpers.diagrams import figure
from helpers.diagrams.style import FONT, KINDS, arrow, box, canvas, note


@figure(
    "10-mesh",
    alt="A 2-D device mesh of 2 machines with 4 devices each: tensor-parallel groups inside a machine, "
    "data-parallel groups across machines",
)
def mesh():
    fig, ax = canvas(8, 3.6)
    for m in range(2):
        y = 2.0 - m * 1.75
        box(ax, 0.2, y - 0.15, 5.9, 1.3, f"machine {m}", "system", align="top", size=FONT - 1)
        for t in range(4):
            x = 0.45 + t * 1.4
            box(ax, x, y, 1.1, 0.75, f"rank {4 * m + t}\n(dp {m}, tp {t})", "process", size=FONT - 1)
    arrow(ax, (1.55, 2.37), (1.85, 2.37), kind="message", both=True)
    note(ax, 7.05, 2.55, "tp axis, inside a machine:\nall-reduce of activations\nin every layer (fast links)",
         "message", size=FONT - 2)  # fmt: skip
    arrow(ax, (1.0, 0.97), (1.0, 1.83), kind="message", both=True)
    note(ax, 7.05, 0.75, "dp axis, across machines:\nall-gather / reduce-scatter\nof parameters, gradients",
         "message", size=FONT - 2)  # fmt: skip
    return fig


def _matrix(ax, x: float, y: float, rows: range, cols: range, title: str, size: float = 1.1, n: int = 8) -> None:
    """An n x n weight matrix at (x, y), the cells this rank holds filled in the data colour."""
    edge, fill = KINDS["data"]
    idle_edge, _ = KINDS["idle"]
    step = size / n
    for r in range(n):
        for c in range(n):
            held = r in rows and c in cols
            colour = edge if held else "white"
            corner = (x + c * step, y + size - (r + 1) * step)
            ax.add_patch(Rectangle(corner, step, step, facecolor=colour, edgecolor=idle_edge, linewidth=0.4))
    ax.add_patch(Rectangle((x, y), size, size, fill=False, edgecolor=edge, linewidth=1.4))
    note(ax, x + size / 2, y - 0.3, title, size=FONT - 2)


@figure(
    "10-what-each-rank-holds",
    alt="What one rank holds under each layout: a whole model, a slice of rows, a slice of columns, "
    "or a slice of a slice",
)
def holds():
    fig, ax = canvas(8, 2.6)
    note(ax, 4.0, 2.4, "one weight matrix; filled: what rank 3 holds (8 ranks, FSDP x TP and HSDP on a 2 x 4 mesh)",
         size=FONT - 1)  # fmt: skip
    all8 = range(8)
    panels = [
        (all8, all8, "DDP, ZeRO-1:\nall of it"),
        (range(3, 4), all8, "FSDP: 1 / n\nof the rows"),
        (all8, range(3, 4), "TP (row-wise):\n1 / t of the columns"),
        (range(0, 4), range(6, 8), "FSDP x TP:\n1 / (dp x tp)"),
        (range(6, 8), all8, "HSDP: 1 / shard group\n(same on each replica)"),
    ]
    for i, (rows, cols, title) in enumerate(panels):
        _matrix(ax, 0.35 + i * 1.55, 0.85, rows, cols, title)
    return fig


@figure(
    "10-what-each-step-sends",
    alt="What one step sends: DDP all-reduces the gradients once; FSDP all-gathers the parameters in the "
    "forward, again in the backward, and reduce-scatters the gradients",
)
def sends():
    fig, ax = canvas(8, 2.6)
    rows = [
        ("DDP", 1.55, [("forward", "data", 1.3), ("backward", "data", 1.4), ("all-reduce\ngradients", "message", 1.5)],
         "2 psi (n-1)/n"),
        ("FSDP", 0.35, [("all-gather", "message", 1.0), ("forward", "data", 1.3), ("all-gather", "message", 1.0),
                        ("backward", "data", 1.4), ("reduce-\nscatter", "message", 1.0)], "3 psi (n-1)/n"),
    ]  # fmt: skip
    for name, y, steps, total in rows:
        note(ax, 0.45, y + 0.35, name, "process", weight="bold")
        x = 0.85
        for label, kind, w in steps:
            box(ax, x, y, w - 0.08, 0.7, label, kind, size=FONT - 2)
            if kind == "message":
                note(ax, x + (w - 0.08) / 2, y + 0.85, "psi (n-1)/n" if name == "FSDP" else total, "message",
                     size=FONT - 3)  # fmt: skip
            x += w
        note(ax, x + 0.1, y + 0.35, f"= {total}", "message", ha="left", size=FONT - 1)
    return fig


@figure(
    "10-pipeline-stages",
    alt="Two pipeline stages, each with only its own blocks, pass activations forward and their gradient back, "
    "and add their squared gradient norms to clip by the global norm",
)
def pipeline_stages():
    fig, ax = canvas(8, 3.3)
    for stage, x in ((0, 0.3), (1, 4.7)):
        box(ax, x, 1.6, 3.0, 1.5, f"stage {stage} = rank {stage}", "process", align="top", size=FONT - 1)
        box(ax, x + 0.3, 1.75, 2.4, 0.8, f"block {stage}: its own\nparameters and Adam state", "data", size=FONT - 2)
        note(ax, x + 1.5, 1.3, rf"$\|g_{stage}\|^2$ of its gradients", "process", size=FONT - 2)
    arrow(ax, (3.35, 2.7), (4.65, 2.7), "activations", "message", size=FONT - 2)
    arrow(ax, (4.65, 2.0), (3.35, 2.0), "their gradient", "message", size=FONT - 2, label_offset=(0.0, -0.38))
    box(ax, 3.25, 0.6, 1.5, 0.55, "all-reduce: sum", "message", size=FONT - 2)
    arrow(ax, (1.8, 1.12), (3.2, 0.88), kind="message")
    arrow(ax, (6.2, 1.12), (4.8, 0.88), kind="message")
    note(ax, 4.0, 0.25, r"every stage clips by $\sqrt{\|g_0\|^2 + \|g_1\|^2}$, the norm of all the gradients",
         "message", size=FONT - 2)  # fmt: skip
    return fig
