"""How long is each notebook's main path? `python -m helpers.main_path [NOTEBOOK ...]`

A first reading should meet the claim, the picture, the demo and its reading, not every caveat a
practitioner may one day need. Those live in "Under the hood" asides: HTML `<details>` blocks in markdown
cells, which JupyterLab and the website show collapsed. The main path is every markdown word outside an
aside, an exercise's text and the key points; the course keeps it at most `BUDGET` words per notebook
(tests/test_main_path.py), and this module is the one place that counts.

An aside is written exactly so (blank lines around its body, so that the markdown inside is rendered):

    <details>
    <summary>Under the hood: what the aside is about</summary>

    The details, in markdown.

    </details>
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

BUDGET = 2500
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ASIDE = re.compile(r"<details>\s*<summary>(?P<summary>.*?)</summary>(?P<body>.*?)</details>", re.S)
# A cell that starts an exercise's task or the key points: its first heading says so.
NOT_MAIN_PATH = re.compile(r"^\s*#{1,4}\s*(Exercises?\b|Key points\b)", re.I)
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\)")
WORD = re.compile(r"[A-Za-z0-9][\w'-]*")
FENCE = re.compile(r"```.*?```", re.S)
HEADING = re.compile(r"^\s*#+\s")

__all__ = ["BUDGET", "Count", "count", "asides", "main"]


@dataclass(frozen=True)
class Count:
    notebook: str
    main_path: int  # words outside asides, exercises and key points
    aside_words: int
    asides: int
    exercise_words: int
    diagrams: int  # images shown from notebooks/figures/


def _words(markdown: str) -> int:
    """Every word a reader meets, code blocks aside: a dotted name (`torch.distributed`) is two words, and
    a picture's alt text and a link's target count too (a strict count: the budget holds on any reading)."""
    return len(WORD.findall(FENCE.sub(" ", markdown)))


def _markdown_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in nb["cells"] if c.get("cell_type") == "markdown"]
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells]


def asides(markdown: str) -> list[tuple[str, str]]:
    """The (summary, body) of each aside in one markdown cell's text."""
    return [(m["summary"].strip(), m["body"]) for m in ASIDE.finditer(markdown)]


def count(path: Path | str) -> Count:
    """Count one notebook's words by where a reader meets them."""
    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"path must be an existing .ipynb notebook, got {str(path)!r}")
    main = aside_words = n_asides = exercise = diagrams = 0
    in_exercise = False  # an exercise's or the key points' text runs until the next heading
    for text in _markdown_cells(path):
        diagrams += sum(1 for m in IMAGE.finditer(text) if m["src"].startswith("figures/"))
        found = asides(text)
        n_asides += len(found)
        aside_words += sum(_words(body) for _, body in found)
        rest = ASIDE.sub(" ", text)
        if NOT_MAIN_PATH.match(rest):
            in_exercise = True
        elif HEADING.match(rest):
            in_exercise = False
        if in_exercise:
            exercise += _words(rest)
        else:
            main += _words(rest)
    return Count(path.name, main, aside_words, n_asides, exercise, diagrams)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    try:
        counts = [count(p) for p in paths]
    except ValueError as error:
        print(f"python -m helpers.main_path: {error}", file=sys.stderr)
        return 2
    print(f"{'notebook':40} {'main path':>9} {'budget':>6} {'asides':>6} {'aside words':>11} {'diagrams':>8}")
    for c in counts:
        flag = "" if c.main_path <= BUDGET else "  over budget"
        print(f"{c.notebook:40} {c.main_path:9} {BUDGET:6} {c.asides:6} {c.aside_words:11} {c.diagrams:8}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
