"""The course's few chart types, so every chapter draws speed-ups and timings the same way.

Each function draws on a new figure and returns it; the notebook cell shows it. Plots are always in
ignored cells (they show measurements), but the functions are unit-tested for their inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

__all__ = ["speedup_bars", "seconds_bars"]

_OK, _BAD, _NEUTRAL = "#4c72b0", "#c44e52", "#8c8c8c"


def _check(labels: Sequence[str], values: Sequence[float], name: str) -> None:
    if isinstance(labels, str) or len(labels) != len(values):
        raise ValueError(f"labels and {name} must be sequences of the same length")
    if not labels:
        raise ValueError(f"labels and {name} must not be empty")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be numbers >= 0, got {value!r}")


def speedup_bars(
    labels: Sequence[str], speedups: Sequence[float], limit: float, title: str, limit_label: str = ""
) -> Figure:
    """Speed-up per variant as bars, with the physical limit (e.g. usable cores) as a dashed line."""
    _check(labels, speedups, "speedups")
    fig, ax = plt.subplots(figsize=(6, 3.2))
    bars = ax.bar(labels, speedups, color=_OK)
    ax.bar_label(bars, fmt="%.2fx")
    ax.axhline(limit, color=_BAD, linestyle="--", label=limit_label or f"limit: {limit:g}x")
    ax.axhline(1.0, color=_NEUTRAL, linewidth=0.8)
    ax.set_ylabel("speed-up (x)")
    ax.set_ylim(0, max(max(speedups), limit) * 1.25)
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def seconds_bars(
    labels: Sequence[str],
    seconds: Sequence[float],
    title: str,
    highlight: Sequence[bool] | None = None,
    highlight_label: str = "",
    log: bool = False,
) -> Figure:
    """Seconds per variant as bars; `highlight` colours the bars that break a rule (e.g. oversubscribed)."""
    _check(labels, seconds, "seconds")
    if highlight is not None and len(highlight) != len(seconds):
        raise ValueError("highlight must have one entry per bar")
    colours = [_BAD if flag else _OK for flag in highlight] if highlight is not None else [_OK] * len(seconds)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    bars = ax.bar(labels, seconds, color=colours)
    ax.bar_label(bars, fmt="%.2f s")
    ax.set_ylabel("seconds")
    if log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(0, max(seconds) * 1.25)
    if highlight is not None and any(highlight) and highlight_label:
        ax.bar(0, 0, color=_BAD, label=highlight_label)
        ax.legend(loc="upper left")
    ax.set_title(title)
    fig.tight_layout()
    return fig
