"""Chapter 06's pictures: why a fork after a thread took a lock hangs the child, and why joining a producer
before reading its queue waits forever."""

from __future__ import annotations

from helpers.diagrams import animation, figure
from helpers.diagrams.style import FONT, arrow, box, canvas, note

__all__ = ["fork_after_lock", "join_before_drain"]

_FORK_CAPTIONS = (
    "1. In the parent, thread 2 takes the lock.",
    "2. The main thread calls fork(). The child gets a copy of all the memory, the lock still\n"
    "marked 'held', but only the thread that called fork(): there is no thread 2 in the child.",
    "3. In the parent, thread 2 releases the lock. The child's lock is a separate copy:\n"
    "it stays 'held'. The child's thread asks for it.",
    "4. The child waits forever: the one thread that could release its lock was never copied.\n"
    "Fix: start processes before threads, or use spawn / forkserver (a fresh process).",
)


@animation(
    "06-fork-after-lock",
    alt="A parent process with two threads; thread 2 holds a lock when the main thread forks; the child gets "
    "the lock in its held state but no thread 2, so its only thread waits for the lock forever",
    steps=len(_FORK_CAPTIONS),
)
def fork_after_lock(step: int):
    fig, ax = canvas(8, 4.4)
    # the parent
    box(ax, 0.2, 1.25, 3.3, 2.95, "parent process", "process", align="top", weight="bold")
    box(ax, 0.45, 2.85, 1.3, 0.55, "main thread", "thread")
    box(ax, 0.45, 1.55, 1.3, 0.55, "thread 2", "thread")
    parent_held = step in (0, 1)
    box(ax, 2.15, 2.2, 1.15, 0.7, "lock:\nheld" if parent_held else "lock:\nfree", "blocked" if parent_held else "data")
    if parent_held:
        arrow(ax, (1.75, 1.85), (2.15, 2.4), "", "thread")
    # the child, from step 1 on
    if step >= 1:
        arrow(ax, (3.5, 3.15), (4.5, 3.15), "fork()", "message", label_offset=(0, 0.08))
        box(ax, 4.5, 1.25, 3.3, 2.95, "child process (a copy)", "process", align="top", weight="bold")
        stuck = step == 3
        box(ax, 4.75, 2.85, 1.3, 0.55, "waits forever" if stuck else "main thread", "blocked" if stuck else "thread")
        box(ax, 4.75, 1.55, 1.3, 0.55, "no thread 2", "idle", dashed=True)
        box(ax, 6.45, 2.2, 1.15, 0.7, "lock:\nheld", "blocked")
        if step >= 2:
            arrow(ax, (6.05, 3.05), (6.55, 2.9), "acquire()", "blocked", label_offset=(0.25, 0.05))
    note(ax, 4.0, 0.6, _FORK_CAPTIONS[step], size=FONT)
    return fig


@figure(
    "06-join-before-drain",
    alt="A cycle of waits: the parent's join waits for the child to exit, the child waits for its feeder thread, "
    "the feeder thread waits for room in the full pipe, and only the parent's get would make room",
)
def join_before_drain():
    fig, ax = canvas(8, 3.9)
    box(ax, 0.2, 2.55, 2.3, 0.95, "parent\nworker.join()", "blocked")
    box(ax, 5.5, 2.55, 2.3, 0.95, "child\nexits when its feeder\nthread is done", "process")
    box(ax, 5.5, 0.75, 2.3, 0.95, "child's feeder thread\nwrites the 8 MB item", "thread")
    box(ax, 2.5, 0.75, 2.1, 0.95, "pipe\nfull at 64 KiB", "system")
    arrow(ax, (2.5, 3.05), (5.5, 3.05), "waits for the child to exit", "blocked")
    arrow(ax, (6.65, 2.55), (6.65, 1.7), "waits for", "blocked", label_offset=(0.45, -0.05))
    arrow(ax, (5.5, 1.22), (4.6, 1.22), "", "blocked")
    note(ax, 5.05, 1.45, "waits for\nroom", "blocked")
    arrow(ax, (2.5, 1.22), (1.35, 2.55), "", "message", dashed=True)
    note(ax, 0.1, 1.45, "only a get() in the parent\nwould make room:\nnever reached", "message", ha="left")
    note(ax, 4.0, 0.3, "Every arrow waits on the next: nobody moves. Fix: get() first, then join().", size=FONT)
    return fig
