"""Pictures of notebook 04: three ways to hand work to processes, and where a killed worker's task goes."""

from __future__ import annotations

from helpers.diagrams import figure
from helpers.diagrams.style import FONT, arrow, box, canvas, note


def _column(ax, x: float, title: str, middle: str, middle_kind: str, workers: str, you: str, back: str) -> None:
    """One way of handing out work: your process on top, what carries the tasks, two workers below."""
    note(ax, x + 1.2, 4.55, title, weight="bold", size=FONT)
    box(ax, x + 0.2, 3.55, 2.0, 0.6, "your process", "process")
    box(ax, x + 0.2, 2.2, 2.0, 0.7, middle, middle_kind, size=FONT - 1)
    box(ax, x + 0.05, 0.75, 1.05, 0.6, workers, "process", size=FONT - 1)
    box(ax, x + 1.3, 0.75, 1.05, 0.6, workers, "process", size=FONT - 1)
    arrow(ax, (x + 0.8, 3.55), (x + 0.8, 2.9), "", "message")
    arrow(ax, (x + 1.6, 2.9), (x + 1.6, 3.55), "", "message")
    note(ax, x + 0.55, 3.22, "tasks", "message", size=FONT - 2)
    note(ax, x + 1.92, 3.22, "results", "message", size=FONT - 2)
    arrow(ax, (x + 0.8, 2.2), (x + 0.6, 1.35), "", "message", both=True)
    arrow(ax, (x + 1.6, 2.2), (x + 1.8, 1.35), "", "message", both=True)
    note(ax, x + 1.2, 0.45, you, size=FONT - 2)
    note(ax, x + 1.2, 0.15, back, size=FONT - 2)


@figure(
    "04-three-ways",
    alt="Process with queues, Pool and ProcessPoolExecutor side by side: your process sends tasks to two "
    "workers and gets results back; with Process you write the queues and the protocol, a Pool splits and "
    "orders the work, an executor returns a future per task",
)
def three_ways():
    fig, ax = canvas(8, 4.8)
    _column(ax, 0.1, "Process + queues", "task queue,\nresult queue", "message", "Process",
            "you write: protocol, stop signs,", "errors, joins; workers live on")  # fmt: skip
    _column(ax, 2.75, "Pool", "the pool: chunks,\norder, re-raises", "system", "worker",
            "map / imap: input order", "imap_unordered: as they finish")  # fmt: skip
    _column(ax, 5.4, "ProcessPoolExecutor", "submit(...) returns\na Future per task", "system", "worker",
            "future.result(timeout=...)", "a dead worker breaks the pool")  # fmt: skip
    return fig


@figure(
    "04-dead-worker",
    alt="A worker killed by SIGKILL in the middle of a task: a Pool starts a replacement worker but the task "
    "is lost, so map waits forever; a ProcessPoolExecutor fails every pending future with BrokenProcessPool",
)
def dead_worker():
    fig, ax = canvas(8, 4.6)
    for y, title in ((4.3, "multiprocessing.Pool"), (2.05, "concurrent.futures.ProcessPoolExecutor")):
        note(ax, 0.15, y, title, weight="bold", size=FONT, ha="left")
    # Pool: the task dies with its worker; a replacement starts, and the result never comes
    box(ax, 0.2, 2.75, 1.9, 1.15, "your process:\nmap() waits\nforever", "blocked", size=FONT - 1)
    box(ax, 3.2, 3.3, 1.7, 0.6, "worker 0 + item 0", "blocked", size=FONT - 1)
    note(ax, 4.05, 3.1, "SIGKILL: gone, and item 0 with it", "blocked", size=FONT - 2)
    box(ax, 3.2, 2.35, 1.7, 0.55, "worker 1", "process", size=FONT - 1)
    box(ax, 6.0, 3.3, 1.8, 0.6, "new worker 0", "process", size=FONT - 1, dashed=True)
    arrow(ax, (4.9, 3.6), (6.0, 3.6), "pool replaces", "system", label_offset=(0, 0.08))
    arrow(ax, (3.2, 2.62), (2.1, 2.95), "its results", "message", label_offset=(0.05, -0.38))
    note(ax, 6.9, 2.75, "item 0's result\nnever arrives", "blocked", size=FONT - 1)
    # Executor: the death breaks the pool, every pending future fails at once
    box(ax, 0.2, 0.3, 1.9, 1.25, "your process:\nBrokenProcessPool\non every future", "blocked", size=FONT - 1)
    box(ax, 3.2, 1.0, 1.7, 0.6, "worker 0 + item 0", "blocked", size=FONT - 1)
    note(ax, 4.05, 0.8, "SIGKILL", "blocked", size=FONT - 2)
    box(ax, 3.2, 0.1, 1.7, 0.5, "worker 1", "idle", size=FONT - 1)
    note(ax, 6.55, 0.35, "terminated by the executor", "system", size=FONT - 2)
    arrow(ax, (4.9, 0.35), (5.3, 0.35), "", "system")
    arrow(ax, (3.2, 1.3), (2.1, 1.1), "the executor\nsees the death", "blocked", label_offset=(0.0, -0.75))
    box(ax, 6.0, 1.0, 1.8, 0.6, "the pool is broken:\nno new work", "blocked", size=FONT - 2)
    return fig
