"""A short main path (issue 38): at most `BUDGET` words per notebook outside asides, exercises and key
points, and every aside well formed, so that JupyterLab and the website show it collapsed with its
markdown rendered."""

from __future__ import annotations

import json
import re

import pytest

from helpers import main_path

NOTEBOOKS = sorted(main_path.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_main_path_within_budget(path):
    c = main_path.count(path)
    assert c.main_path <= main_path.BUDGET, (
        f"{path.name}: {c.main_path} words on the main path, budget {main_path.BUDGET}: move details that a "
        "first reading does not need into 'Under the hood' asides (never the argument itself)"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_asides_are_collapsed_and_render(path):
    for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        text = "".join(cell["source"])
        if cell["cell_type"] != "markdown" or "<details" not in text:
            continue
        assert text.count("<details") == text.count("</details>"), f"cell {i}: unbalanced <details>"
        assert "<details open" not in text, f"cell {i}: an aside must start collapsed"
        found = main_path.asides(text)
        assert len(found) == text.count("<details"), f"cell {i}: write an aside as <details> then <summary>"
        for summary, body in found:
            assert summary.startswith("Under the hood: "), f"cell {i}: summary {summary!r}"
            # a summary is raw HTML: markdown is not rendered there, so code is written <code>...</code>
            assert "`" not in summary, f"cell {i}: write code in a summary as <code>...</code>: {summary!r}"
            # CommonMark renders the markdown inside an HTML block only after a blank line
            assert re.match(r"\n\s*\n", body) and re.search(r"\n\s*\n\s*$", body), f"cell {i}: blank lines"


def test_counter_counts_only_the_main_path(tmp_path):
    cells = [
        "# Title\n\nOne two three.\n\n<details>\n<summary>Under the hood: x</summary>\n\nfour five\n\n</details>",
        "![a picture](figures/00-x.svg) ten\n\n```python\nnot = counted\n```",
        "### Exercise 1: six seven",
        "the exercise's text goes on",
        "## Key points\n- eight",
    ]
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": s} for s in cells], "metadata": {},
          "nbformat": 4, "nbformat_minor": 5}  # fmt: skip
    path = tmp_path / "00_x.ipynb"
    path.write_text(json.dumps(nb))
    c = main_path.count(path)
    # main: "Title One two three" and "a picture figures 00-x svg ten" (alt text and target count; code not)
    assert (c.main_path, c.aside_words, c.asides, c.diagrams) == (10, 2, 1, 1)
    assert c.exercise_words == 12  # "Exercise 1 six seven", "the exercise's text goes on", "Key points eight"
    with pytest.raises(ValueError, match="ipynb"):
        main_path.count(tmp_path / "missing.ipynb")
