"""One look for every diagram of the course: the palette and the few shapes the pictures are made of.

A learner meets the same kinds of thing in every chapter (a process, a thread, shared memory, a message
crossing between processes), so each kind has one colour everywhere: once a reader knows that blue is a
process, no later picture needs a legend for it. The colours are Okabe and Ito's, which stay distinct for
readers with colour-vision deficiencies and on a classroom projector.

Every drawing works in inches on a canvas of fixed width (`canvas`), so text keeps one size across the
course and stays readable at the website's width.
"""

from __future__ import annotations

from typing import Literal

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

__all__ = ["KINDS", "Kind", "canvas", "box", "arrow", "note", "lane", "legend", "FONT"]

Kind = Literal["process", "thread", "shared", "message", "system", "blocked", "data", "idle"]

# kind: (edge colour, fill colour). Edges are Okabe-Ito; fills are the same hue, light.
KINDS: dict[str, tuple[str, str]] = {
    "process": ("#0072B2", "#D6E9F8"),  # a process: the main process, a worker, a rank
    "thread": ("#E69F00", "#FCEBC8"),  # a thread inside a process
    "shared": ("#009E73", "#CCEFE4"),  # memory more than one process sees (/dev/shm, a shared tensor)
    "message": ("#CC79A7", "#F5DDEB"),  # what crosses between processes: a pickle, a handle, a tensor sent
    "system": ("#555555", "#EBEBEB"),  # the OS, the launcher, a store, a file: not ours, but in the picture
    "blocked": ("#D55E00", "#FADBC8"),  # waiting forever, dead, an error
    "data": ("#56B4E9", "#E0F1FB"),  # data being computed on: a batch, a tensor, a layer's weights
    "idle": ("#999999", "#FFFFFF"),  # time or space where nothing happens (a pipeline's bubble)
}
FONT = 11  # points; at 100 dpi and the site's width this reads like body text


def canvas(width: float, height: float) -> tuple[Figure, Axes]:
    """A blank drawing area of `width` x `height` inches, whose data coordinates are inches too."""
    if width <= 0 or height <= 0:
        raise ValueError(f"width and height must be positive inches, got {width} x {height}")
    # A bare Figure, not pyplot's: drawing a diagram must not change the notebook's plotting backend or
    # leave a figure for the inline backend to show at the end of the cell.
    fig = Figure(figsize=(width, height), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    return fig, ax


def _colours(kind: str) -> tuple[str, str]:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    return KINDS[kind]


def box(
    ax: Axes,
    x: float,
    y: float,
    w: float,
    h: float,
    label: str = "",
    kind: str = "process",
    *,
    size: float = FONT,
    weight: str = "normal",
    dashed: bool = False,
    align: Literal["center", "top"] = "center",
) -> FancyBboxPatch:
    """A rounded box with its lower-left corner at (x, y) and `label` inside (centred, or at the top when
    other boxes sit inside it)."""
    edge, fill = _colours(kind)
    patch = FancyBboxPatch(
        (x, y), w, h, boxstyle="round,pad=0,rounding_size=0.08", linewidth=1.6, edgecolor=edge, facecolor=fill,
        linestyle="--" if dashed else "-",
    )  # fmt: skip
    ax.add_patch(patch)
    if label:
        ty = y + h / 2 if align == "center" else y + h - 0.18
        va = "center" if align == "center" else "top"
        ax.text(x + w / 2, ty + (0 if align == "center" else 0.1), label, ha="center", va=va, fontsize=size,
                weight=weight, color="#222222")  # fmt: skip
    return patch


def arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    label: str = "",
    kind: str = "message",
    *,
    dashed: bool = False,
    both: bool = False,
    bend: float = 0.0,
    size: float = FONT - 1,
    label_at: float = 0.5,
    label_offset: tuple[float, float] = (0.0, 0.12),
) -> FancyArrowPatch:
    """An arrow from `start` to `end` in the colour of `kind`, with an optional label near `label_at` of
    its length (0 at the start, 1 at the end), nudged by `label_offset` inches."""
    edge, _ = _colours(kind)
    patch = FancyArrowPatch(
        start, end, arrowstyle="<|-|>" if both else "-|>", mutation_scale=14, linewidth=1.8, color=edge,
        linestyle="--" if dashed else "-", connectionstyle=f"arc3,rad={bend}", shrinkA=2, shrinkB=2,
    )  # fmt: skip
    ax.add_patch(patch)
    if label:
        lx = start[0] + (end[0] - start[0]) * label_at + label_offset[0]
        ly = start[1] + (end[1] - start[1]) * label_at + label_offset[1]
        ax.text(lx, ly, label, ha="center", va="bottom", fontsize=size, color=edge)
    return patch


def note(
    ax: Axes,
    x: float,
    y: float,
    text: str,
    kind: str | None = None,
    *,
    size: float = FONT - 1,
    ha: str = "center",
    va: str = "center",
    weight: str = "normal",
    style: str = "normal",
) -> None:
    """Plain text at (x, y), in the colour of `kind` (dark grey without one)."""
    colour = _colours(kind)[0] if kind else "#333333"
    ax.text(x, y, text, ha=ha, va=va, fontsize=size, color=colour, weight=weight, style=style)


def lane(ax: Axes, y: float, h: float, label: str, x0: float, x1: float, kind: str = "process") -> None:
    """A horizontal band for one process on a timeline, its name at the left of `x0`."""
    edge, _ = _colours(kind)
    ax.plot([x0, x1], [y + h / 2, y + h / 2], color=edge, linewidth=0.8, alpha=0.4)
    ax.text(x0 - 0.1, y + h / 2, label, ha="right", va="center", fontsize=FONT - 1, color=edge)


def legend(ax: Axes, x: float, y: float, kinds: list[tuple[str, str]], *, size: float = FONT - 2) -> None:
    """A one-line key at (x, y): a small box per (kind, meaning), left to right."""
    for kind, meaning in kinds:
        box(ax, x, y - 0.09, 0.22, 0.18, kind=kind)
        ax.text(x + 0.3, y, meaning, ha="left", va="center", fontsize=size, color="#333333")
        x += 0.45 + 0.075 * len(meaning)
