"""Pictures of chapter 02: what crosses a queue when a tensor is sent, under each sharing strategy, and why
joining a producer before draining its queue waits forever."""

from __future__ import annotations

from helpers.diagrams import figure
from helpers.diagrams.style import FONT, arrow, box, canvas, note


@figure(
    "02-tensor-handle",
    alt="Putting a tensor on a queue moves its storage into a shared-memory segment and sends only a small "
    "handle through the pipe. Under file_descriptor the receiver connects back to the sender to get an open "
    "file descriptor of the segment, so the sender must still be alive. Under file_system the handle holds "
    "the segment's name in /dev/shm, which the receiver opens.",
)
def tensor_handle():
    """Storage in shared memory, a handle through the pipe, and how each strategy finds the segment."""
    fig, ax = canvas(8, 4.4)
    box(ax, 0.15, 2.45, 2.2, 1.8, "sender", "process", align="top", weight="bold")
    box(ax, 0.35, 2.6, 1.8, 0.75, "tensor\n(shape, strides)", "data", size=FONT - 1)
    box(ax, 5.65, 2.45, 2.2, 1.8, "receiver", "process", align="top", weight="bold")
    box(ax, 5.85, 2.6, 1.8, 0.75, "tensor\n(same storage)", "data", size=FONT - 1)
    arrow(ax, (2.15, 3.0), (5.85, 3.0), kind="message")
    note(ax, 4.0, 3.55, "queue (a pipe): put sends\nonly a handle, < 1 KB", "message", size=FONT - 1)
    box(ax, 2.9, 1.5, 2.2, 0.75, "storage: the bytes,\nin shared memory", "shared", size=FONT - 1)
    arrow(ax, (1.25, 2.6), (2.9, 1.9), kind="shared")
    arrow(ax, (6.75, 2.6), (5.1, 1.9), kind="shared")
    note(ax, 4.0, 2.5, "both map the same pages", "shared", size=FONT - 2)
    box(ax, 0.15, 0.1, 3.75, 1.15, "", "system")
    note(ax, 0.3, 1.05, "file_descriptor (Linux's default)", "process", ha="left", size=FONT - 1, weight="bold")
    note(ax, 0.3, 0.75, "the receiver fetches an open file descriptor\nfrom the sender, over a socket: the sender\n"
         "must still be alive", ha="left", va="top", size=FONT - 2)  # fmt: skip
    box(ax, 4.1, 0.1, 3.75, 1.15, "", "system")
    note(ax, 4.25, 1.05, "file_system (macOS's only one)", "process", ha="left", size=FONT - 1, weight="bold")
    note(ax, 4.25, 0.75, "the handle holds a file name in /dev/shm;\nthe receiver opens it by name", ha="left",
         va="top", size=FONT - 2)  # fmt: skip
    return fig


@figure(
    "02-join-before-drain",
    alt="The parent calls join and waits for the child to exit. The child's feeder thread has filled the pipe, "
    "which holds about 64 KB, and waits for the parent to read the rest of the 8 MB item. Each waits for the "
    "other: neither ever finishes.",
)
def join_before_drain():
    """Who waits for whom when the parent joins a producer whose item is still in the pipe."""
    fig, ax = canvas(8, 3.6)
    box(ax, 0.2, 1.1, 2.2, 1.6, "parent", "process", align="top", weight="bold")
    box(ax, 0.4, 1.3, 1.8, 0.7, "child.join()", "blocked", size=FONT - 1)
    box(ax, 5.6, 1.1, 2.2, 1.6, "child", "process", align="top", weight="bold")
    box(ax, 5.8, 1.3, 1.8, 0.7, "feeder thread:\nwrite the rest", "blocked", size=FONT - 1)
    box(ax, 3.0, 1.35, 2.0, 0.6, "pipe: full\n(it holds ~64 KB)", "system", size=FONT - 2)
    arrow(ax, (1.3, 2.7), (6.7, 2.7), "waits for the child to exit", "blocked", bend=-0.25, label_offset=(0, 0.12))
    arrow(ax, (5.8, 1.65), (5.0, 1.65), kind="message")
    arrow(ax, (3.0, 1.45), (1.3, 1.1), "the child waits for a read that never comes", "blocked", bend=-0.35,
          label_offset=(1.0, -0.75))  # fmt: skip
    note(ax, 4.0, 0.15, "each waits for the other: neither ever finishes", "blocked", size=FONT - 1, weight="bold")
    return fig
