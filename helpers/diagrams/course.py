"""The course's path, for the README (the landing page of the repository and of the website)."""

from __future__ import annotations

from helpers.diagrams import figure
from helpers.diagrams.style import FONT, arrow, box, canvas, note

PARTS = [
    ("One machine, many processes", "process", [
        ("00", "orientation:\nprocesses, threads,\nstart methods"),
        ("01", "DataLoader\nworkers"),
        ("02", "shared tensors\nand queues"),
        ("03", "Hogwild:\none shared model"),
        ("04", "Pool vs Process,\nworkers that die"),
    ]),
    ("Many processes, one job", "message", [
        ("05", "process groups,\ncollectives, DDP"),
        ("06", "deadlocks and\npitfalls, diagnose"),
        ("07", "DDP in practice:\ntorchrun, restarts"),
        ("08", "capstone: a slow\njob made fast"),
    ]),
    ("A model bigger than one process", "shared", [
        ("09", "pipelines, tensor\nparallelism, FSDP"),
        ("10", "a thousand ranks,\nsimulated"),
    ]),
]  # fmt: skip


@figure(
    "course-path",
    alt="The course's path: chapters 00 to 04 (one machine, many processes), 05 to 08 (many processes, one "
    "job) and 09 to 10 (a model bigger than one process), each chapter a box in order, left to right.",
)
def course_path():
    fig, ax = canvas(12, 5.2)
    w, h, gap, step = 1.9, 1.05, 0.45, 1.7
    for row, (title, kind, chapters) in enumerate(PARTS):
        y = 5.2 - 0.45 - h - row * step
        note(ax, 0.35, y + h + 0.2, title, kind, size=FONT, ha="left", weight="bold")
        for i, (number, text) in enumerate(chapters):
            x = 0.35 + i * (w + gap)
            box(ax, x, y, w, h, "", kind)
            note(ax, x + 0.1, y + h - 0.17, number, kind, size=FONT, ha="left", weight="bold")
            note(ax, x + w / 2, y + h / 2 - 0.08, text, size=FONT - 1.5)
            if i:
                arrow(ax, (x - gap + 0.02, y + h / 2), (x - 0.02, y + h / 2), kind="system")
    return fig
