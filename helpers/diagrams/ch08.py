"""Chapter 08's pictures: where a slow job's time goes (the main process waiting for data, then workers
loading ahead), and why two workers draw the same "random" augmentations from a generator stored on the
dataset."""

from __future__ import annotations

from helpers.diagrams import figure
from helpers.diagrams.style import FONT, arrow, box, canvas, lane, legend, note

__all__ = ["slow_job_timeline", "copied_generator"]


def _timeline(ax, y: float, rows: list[tuple[str, list[tuple[float, float, str, str]]]]) -> None:
    """Lanes from `y` downwards: (label, [(start, length, text, kind), ...]) in inches from x = 1.8."""
    for i, (label, spans) in enumerate(rows):
        top = y - i * 0.55
        lane(ax, top, 0.4, label, 1.8, 7.9, "process")
        for start, length, text, kind in spans:
            box(ax, 1.8 + start, top, length - 0.04, 0.4, text, kind, size=FONT - 3)


@figure(
    "08-slow-job-timeline",
    alt="Two timelines of the same training job. Before: one main process alternates long waits while it "
    "reads each batch with short training steps. After: two workers read batches ahead and the main "
    "process runs step after step, waiting only briefly",
)
def slow_job_timeline():
    fig, ax = canvas(8, 4.2)
    note(ax, 0.2, 3.95, "before: num_workers=0", ha="left", weight="bold", size=FONT)
    before = [(i * 1.5, 1.15, "read batch", "idle") for i in range(4)]
    before += [(i * 1.5 + 1.15, 0.35, f"{i}", "data") for i in range(4)]
    _timeline(ax, 3.3, [("main", before)])
    note(ax, 0.2, 2.75, "after: 2 workers load ahead (prefetch)", ha="left", weight="bold", size=FONT)
    load, step = 1.15, 0.35  # the same read and step as before: only who does the reading changes
    workers = [(f"worker {w}", [(i * load, load, f"batch {2 * i + w}", "process") for i in range(4)]) for w in (0, 1)]
    main = []
    for i in range(4):  # both workers' batches of round i are ready at (i + 1) * load
        ready = (i + 1) * load
        if i == 0:
            main.append((0.0, ready, "wait", "idle"))
        main += [(ready, step, f"{2 * i}", "data"), (ready + step, step, f"{2 * i + 1}", "data")]
        gap = (i + 2) * load - (ready + 2 * step)
        if i < 3 and gap > 0:
            main.append((ready + 2 * step, gap, "wait", "idle"))
    _timeline(ax, 2.1, [*workers, ("main", main)])
    note(ax, 1.8, 0.25, "time →", ha="left", size=FONT - 1)
    legend(
        ax, 2.7, 0.25, [("idle", "waiting for data"), ("data", "training step on batch n"), ("process", "worker reads")]
    )
    return fig


@figure(
    "08-copied-generator",
    alt="The dataset, with a random generator stored in it, is copied into each DataLoader worker in the "
    "same state; both workers draw the same numbers, until worker_init_fn rebuilds each generator from "
    "the worker's own seed",
)
def copied_generator():
    fig, ax = canvas(8, 3.3)
    box(ax, 0.2, 1.2, 2.0, 1.0, "main process\ndataset.rng\n(state S)", "process", size=FONT - 1)
    for i, y in enumerate((2.05, 0.35)):
        box(ax, 3.4, y, 2.0, 0.9, f"worker {i}\ncopy of rng\n(state S)", "process", size=FONT - 1)
        arrow(ax, (2.2, 1.7), (3.4, y + 0.45), "fork / pickle" if i == 0 else "", "message", label_offset=(0, 0.12))
        box(ax, 5.9, y + 0.15, 1.9, 0.6, "draws 0.31, -1.2, …", "blocked", size=FONT - 2)
        arrow(ax, (5.4, y + 0.45), (5.9, y + 0.45), "", "data")
    note(ax, 6.85, 1.62, "the same numbers", "blocked", size=FONT - 1)
    note(ax, 4.4, 3.15, "fix: worker_init_fn rebuilds rng from get_worker_info().seed", size=FONT - 1)
    return fig
