"""Pictures of chapter 01: the queues between a DataLoader and its workers, and why reading a list of
Python objects in a forked worker copies memory while reading an array does not."""

from __future__ import annotations

from helpers.diagrams import figure
from helpers.diagrams.style import FONT, arrow, box, canvas, note


@figure(
    "01-dataloader-queues",
    alt="The main process sends batch indices on one index queue per worker, two per worker ahead of time "
    "(prefetch_factor). Each worker loads and collates its batch and puts it on one shared result queue. "
    "The main process hands batches to the training loop in index order, holding back a batch that arrives "
    "early.",
)
def dataloader_queues():
    """Index queues out, one result queue back, in-order delivery."""
    fig, ax = canvas(8, 4.2)
    box(ax, 0.15, 0.3, 2.3, 3.6, "main process", "process", align="top", weight="bold")
    box(ax, 0.35, 2.6, 1.9, 0.6, "sampler:\nbatch 0, 1, 2, ...", "data", size=FONT - 1)
    box(ax, 0.35, 0.5, 1.9, 1.0, "reorder buffer:\nbatch 3 waits\nfor batch 2", "data", size=FONT - 1)
    note(ax, 1.3, 1.9, "your loop gets\n0, 1, 2, 3 in order", "process", size=FONT - 1)

    for i, y in enumerate((2.55, 1.25)):
        box(ax, 3.0, y, 1.5, 0.55, f"index queue {i}", "message", size=FONT - 1)
        box(ax, 5.0, y - 0.1, 1.4, 0.75, f"worker {i}\n1 torch thread", "process", size=FONT - 1)
        arrow(ax, (4.5, y + 0.28), (5.0, y + 0.28))
    arrow(ax, (2.25, 2.9), (3.0, 2.85), kind="message")
    arrow(ax, (2.25, 2.75), (3.0, 1.6), kind="message")
    note(ax, 3.75, 3.3, "batches 0, 2", "message", size=FONT - 1)
    note(ax, 3.75, 2.0, "batches 1, 3", "message", size=FONT - 1)
    note(ax, 3.75, 0.95, "2 indices per worker\nsent ahead (prefetch)", size=FONT - 2)

    box(ax, 6.75, 0.5, 1.1, 3.0, "result\nqueue\n(one,\nshared)", "message", size=FONT - 1)
    arrow(ax, (6.4, 2.82), (6.75, 2.6))
    arrow(ax, (6.4, 1.52), (6.75, 1.7))
    arrow(ax, (6.75, 0.75), (2.25, 0.75), "finished batches, in any order", "message", label_offset=(0.0, -0.34))
    return fig


@figure(
    "01-copy-on-read",
    alt="A forked worker shares the parent's memory pages. Reading a list of Python objects writes each "
    "object's reference count, so every page the list occupies is copied into the worker. Reading a NumPy "
    "array or a tensor writes nothing, so its pages stay shared.",
)
def copy_on_read():
    """Refcounts are writes: reading Python objects copies pages, reading an array does not."""
    fig, ax = canvas(8, 3.6)
    note(ax, 2.0, 3.4, "a list of Python objects", weight="bold")
    note(ax, 6.0, 3.4, "a NumPy array or tensor", weight="bold")
    ax.plot([4.0, 4.0], [0.2, 3.5], color="#BBBBBB", linewidth=1)
    # left: parent pages, worker's copies
    box(ax, 0.2, 2.2, 3.6, 0.9, "parent", "process", align="top")
    for k in range(4):
        box(ax, 0.35 + k * 0.85, 2.3, 0.75, 0.4, "obj, refs", "data", size=FONT - 3)
    box(ax, 0.2, 0.3, 3.6, 1.3, "worker (forked)", "process", align="top")
    for k in range(4):
        box(ax, 0.35 + k * 0.85, 0.45, 0.75, 0.55, "copy", "blocked", size=FONT - 2)
    note(ax, 2.0, 1.9, "reading writes refs += 1: each page copied", "blocked", size=FONT - 1)
    # right: shared pages stay shared
    box(ax, 4.2, 2.2, 3.6, 0.9, "parent", "process", align="top")
    box(ax, 4.35, 2.3, 3.3, 0.4, "raw numbers: 3.1 0.5 2.7 ...", "shared", size=FONT - 2)
    box(ax, 4.2, 0.3, 3.6, 1.3, "worker (forked)", "process", align="top")
    box(ax, 4.35, 0.45, 3.3, 0.55, "the same pages, still shared", "shared", size=FONT - 2, dashed=True)
    arrow(ax, (6.0, 2.3), (6.0, 1.0), kind="shared", both=True)
    note(ax, 6.1, 1.9, "reading writes nothing", "shared", size=FONT - 1, ha="left")
    return fig
