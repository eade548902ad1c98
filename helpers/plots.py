"""The course's few chart types, so every chapter draws speed-ups and timings the same way.

Each function draws on a new figure and returns it; the notebook cell shows it. Plots are always in
ignored cells (they show measurements), but the functions are unit-tested for their inputs.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

__all__ = ["speedup_bars", "bars", "scaling", "timelines", "curves"]

_OK, _BAD, _NEUTRAL = "#4c72b0", "#c44e52", "#8c8c8c"


def _check(labels: Sequence[str], values: Sequence[float], name: str, allow_negative: bool = False) -> None:
    if isinstance(labels, str) or len(labels) != len(values):
        raise ValueError(f"labels and {name} must be sequences of the same length")
    if not labels:
        raise ValueError(f"labels and {name} must not be empty")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name} must be numbers, got {value!r}")
        if value < 0 and not allow_negative:
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


def bars(
    labels: Sequence[str],
    values: Sequence[float],
    title: str,
    unit: str = "s",
    highlight: Sequence[bool] | None = None,
    highlight_label: str = "",
    log: bool = False,
) -> Figure:
    """One value per variant as bars (seconds by default); `highlight` colours the bars that break a
    rule (e.g. oversubscribed). Values may be negative on a linear scale: a measured change, such as the
    memory a worker gained, can come out slightly below zero."""
    _check(labels, values, "values", allow_negative=not log)
    if highlight is not None and len(highlight) != len(values):
        raise ValueError("highlight must have one entry per bar")
    colours = [_BAD if flag else _OK for flag in highlight] if highlight is not None else [_OK] * len(values)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    bars = ax.bar(labels, values, color=colours)
    ax.bar_label(bars, labels=[f"{v:,.0f} {unit}" if v >= 100 else f"{v:.2f} {unit}" for v in values])
    ax.set_ylabel({"s": "seconds", "MB": "MB"}.get(unit, unit))
    if log:
        ax.set_yscale("log")
    else:
        top = max(values) * 1.25 if max(values) > 0 else 1.0
        ax.set_ylim(min(0.0, min(values) * 1.25), top)
    if highlight is not None and any(highlight) and highlight_label:
        ax.bar(0, 0, color=_BAD, label=highlight_label)
        ax.legend(loc="upper left")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def scaling(
    workers: Sequence[int],
    speedups: Sequence[float],
    cores: int,
    title: str,
    ideal: Sequence[float] | None = None,
    label: str = "measured",
    xlabel: str = "num_workers",
    ylabel: str = "speed-up over num_workers=0 (x)",
) -> Figure:
    """Speed-up against a worker count, with the ideal line and the usable cores marked."""
    _check([str(w) for w in workers], speedups, "speedups")
    ideal = [max(1, w) for w in workers] if ideal is None else ideal
    fig, ax = plt.subplots(figsize=(6, 3.4))
    ax.plot(workers, ideal, color=_NEUTRAL, linestyle="--", label="ideal")
    ax.plot(workers, speedups, color=_OK, marker="o", label=label)
    ax.axvline(cores, color=_BAD, linestyle=":", label=f"usable cores: {cores}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks(list(workers))
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def timelines(
    rows: Sequence[tuple[str, Sequence[tuple[int, int, float, float]], Sequence[tuple[int, float]]]],
) -> Figure:
    """A Gantt chart per loader: one lane per worker (and the main process), a bar per batch loaded,
    numbered by batch, and a tick where the main loop received each batch."""
    if not rows:
        raise ValueError("rows must hold at least one (title, spans, consumed) triple")
    end = max(max([s[3] for s in spans] + [c[1] for c in consumed]) for _, spans, consumed in rows)
    fig, axes = plt.subplots(len(rows), 1, figsize=(8, 1.2 + 1.1 * len(rows)), sharex=True, squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, (title, spans, consumed) in zip(axes[:, 0], rows, strict=True):
        lanes = sorted({worker for _, worker, _, _ in spans})
        lane_of = {worker: i + 1 for i, worker in enumerate(lanes)}
        for batch, worker, start, stop in spans:
            y = lane_of[worker]
            ax.barh(
                y, stop - start, left=start, height=0.6, color=colours(batch % 10), edgecolor="black", linewidth=0.3
            )
            ax.text((start + stop) / 2, y, str(batch), ha="center", va="center", fontsize=7)
        ax.scatter([t for _, t in consumed], [0] * len(consumed), marker="|", s=120, color="black")
        ax.set_yticks([0] + [lane_of[w] for w in lanes])
        ax.set_yticklabels(["main gets"] + ["main loads" if w < 0 else f"worker {w}" for w in lanes], fontsize=8)
        ax.set_ylim(-0.7, len(lanes) + 0.7)
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlim(0, end * 1.02)
    axes[-1, 0].set_xlabel("seconds since iter(loader)")
    fig.tight_layout()
    return fig


def curves(
    series: dict[str, Sequence[float]],
    title: str,
    smooth: int = 1,
    xlabel: str = "step",
    ylabel: str = "training loss",
) -> Figure:
    """One line per named series (e.g. the loss of each process), each a moving average over `smooth`
    points: single-batch losses are too noisy to compare by eye."""
    if not isinstance(series, dict) or not series:
        raise ValueError("series must be a non-empty dict of name -> sequence of numbers")
    if isinstance(smooth, bool) or not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth must be an int >= 1, got {smooth!r}")
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for name, values in series.items():
        values = [float(v) for v in values]
        if not values:
            raise ValueError(f"series {name!r} is empty")
        window = min(smooth, len(values))
        averaged = [sum(values[i - window + 1 : i + 1]) / window for i in range(window - 1, len(values))]
        ax.plot(range(window, len(values) + 1), averaged, label=name, linewidth=1.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel if smooth == 1 else f"{ylabel} (mean of {smooth})")
    ax.set_title(title)
    ax.legend(loc="upper right")
    fig.tight_layout()
    return fig
