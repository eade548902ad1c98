"""Pictures of chapter 00: what a child process starts from under fork and under spawn, and what a spawn
child runs again when it imports the parent's script."""

from __future__ import annotations

from helpers.diagrams import figure
from helpers.diagrams.style import FONT, arrow, box, canvas, note


@figure(
    "00-fork-vs-spawn",
    alt="Left, fork: the child is a copy of the parent, sharing its memory pages copy-on-write, with only the "
    "thread that called fork and a lock still held by a thread that does not exist in the child. Right, spawn: "
    "the parent pickles the target's module and name and the arguments; a new interpreter imports torch and "
    "the module again and sees the values written in the file.",
)
def fork_vs_spawn():
    """Side by side: fork copies a running process, spawn starts a new one that imports what it needs."""
    fig, ax = canvas(8, 4.6)
    note(ax, 2.0, 4.4, "fork: a copy of the parent", weight="bold", size=FONT + 1)
    note(ax, 6.0, 4.4, "spawn: a new interpreter", weight="bold", size=FONT + 1)
    ax.plot([4.0, 4.0], [0.2, 4.5], color="#BBBBBB", linewidth=1)

    # fork: parent above, child below, memory in between shared copy-on-write
    box(ax, 0.2, 2.75, 3.6, 1.35, "parent (the kernel)", "process", align="top")
    box(ax, 0.35, 2.85, 1.55, 0.55, "memory:\ntorch, COUNTER=42", "data", size=FONT - 2)
    box(ax, 2.05, 3.35, 0.8, 0.3, "main", "thread", size=FONT - 2)
    box(ax, 2.9, 3.35, 0.8, 0.3, "other", "thread", size=FONT - 2)
    box(ax, 2.05, 2.88, 1.65, 0.35, "lock held by other", "blocked", size=FONT - 2)
    arrow(ax, (0.6, 2.75), (0.6, 2.15), kind="system")
    note(ax, 0.75, 2.45, "fork(): pages shared, copied on write", "system", ha="left")
    box(ax, 0.2, 0.3, 3.6, 1.8, "child", "process", align="top")
    box(ax, 0.35, 0.45, 1.55, 0.55, "same memory:\ntorch, COUNTER=42", "shared", size=FONT - 2)
    box(ax, 2.05, 1.35, 0.8, 0.3, "main", "thread", size=FONT - 2)
    box(ax, 2.9, 1.35, 0.8, 0.3, "(gone)", "idle", size=FONT - 2, dashed=True)
    box(ax, 2.05, 0.55, 1.65, 0.55, "lock still held:\nnobody releases it", "blocked", size=FONT - 2)

    # spawn: parent sends a reference, child imports
    box(ax, 4.2, 2.75, 3.6, 1.35, "parent (the kernel)", "process", align="top")
    box(ax, 4.35, 2.85, 3.3, 0.55, "memory: torch, COUNTER=42\n(not copied)", "data", size=FONT - 2)
    arrow(ax, (4.6, 2.75), (4.6, 2.15))
    note(ax, 4.75, 2.45, "pickled: module + function name, args", "message", ha="left")
    box(ax, 4.2, 0.3, 3.6, 1.8, "child: a fresh Python", "process", align="top")
    box(ax, 4.35, 1.05, 3.3, 0.55, "import torch again\nimport helpers.orientation", "system",
        size=FONT - 2)  # fmt: skip
    box(ax, 4.35, 0.4, 3.3, 0.5, "COUNTER=0, as in the file;\none thread, no lock held", "data", size=FONT - 2)
    return fig


@figure(
    "00-main-guard",
    alt="A script run with python. A spawn child imports the same file as __mp_main__: the definitions and "
    "every top-level line run again in it, but not the block under if __name__ == '__main__', so only a "
    "script whose process-starting code sits under the guard can be imported by its children.",
)
def main_guard():
    """What runs where: the script in the parent, the same file imported by each spawn child."""
    fig, ax = canvas(8, 3.6)
    lines = [
        ("import multiprocessing as mp", "data"),
        ("def work(): ...", "data"),
        ('if __name__ == "__main__":', "message"),
        ('    p = mp.get_context("spawn").Process(target=work)', "message"),
        ("    p.start(); p.join(timeout=60)", "message"),
    ]
    note(ax, 2.2, 3.3, "script.py, run as python script.py", weight="bold")
    for i, (text, kind) in enumerate(lines):
        y = 2.75 - i * 0.5
        box(ax, 0.2, y, 4.0, 0.4, "", kind)
        note(ax, 0.35, y + 0.2, text, ha="left", size=FONT - 1)
    note(ax, 5.0, 3.3, "in the parent", weight="bold")
    note(ax, 7.0, 3.3, "in each spawn child", weight="bold")
    for i in range(len(lines)):
        y = 2.95 - i * 0.5
        note(ax, 5.0, y, "runs", "process")
        child = "runs again" if i < 2 else "False: __name__ is\n'__mp_main__'" if i == 2 else "skipped"
        note(ax, 7.0, y, child, "process" if i < 2 else "blocked", size=FONT - 1 if i != 2 else FONT - 2)
    note(ax, 4.2, 0.2, "A spawn child imports the script to find work: every top-level line runs again there.",
         "message")  # fmt: skip
    return fig
