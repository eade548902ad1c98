"""The course's pictures (issue 38): drawn by code, stored as files, shown by the notebooks.

A stored picture that the code no longer draws is a picture nobody can restyle or fix, and a drawing no
notebook shows is dead code; both fail here. Every chapter explains its mechanism with at least two
pictures, and the course animates at least two where motion is the lesson.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import diagrams

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\(figures/(?P<file>[^)\s]+)\)")
MIN_PER_CHAPTER = 2
MIN_ANIMATED = 2


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _text(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


README = Path(__file__).resolve().parent.parent / "README.md"
README_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\(notebooks/figures/(?P<file>[^)\s]+)\)")


def _shown() -> dict[str, list[tuple[str, str]]]:
    """file name -> [(notebook or README.md, alt text)] for every picture of notebooks/figures that a
    markdown cell or the README shows."""
    shown: dict[str, list[tuple[str, str]]] = {}
    for m in README_IMAGE.finditer(README.read_text(encoding="utf-8")):
        shown.setdefault(m["file"], []).append((README.name, m["alt"]))
    for path in NOTEBOOKS:
        for cell in _cells(path):
            if cell["cell_type"] == "markdown":
                for m in IMAGE.finditer(_text(cell)):
                    shown.setdefault(m["file"], []).append((path.name, m["alt"]))
    return shown


@pytest.fixture(scope="module")
def registry() -> dict[str, diagrams.Diagram]:
    return diagrams.registry()


def test_every_stored_diagram_is_what_the_code_draws_now(registry):
    assert not diagrams.stale(), "redraw them with `python -m helpers.diagrams` and commit notebooks/figures/"


def test_every_stored_file_is_a_registered_diagram(registry):
    files = {d.filename for d in registry.values()}
    stray = sorted(p.name for p in diagrams.FIGURES_DIR.glob("*") if p.name not in files)
    assert not stray, f"files in notebooks/figures/ that no code draws: {stray}"


def test_every_diagram_is_shown_with_its_alt_text(registry):
    shown = _shown()
    for d in registry.values():
        assert d.filename in shown, f"{d.filename} is drawn but no notebook shows it"
        for notebook, alt in shown[d.filename]:
            assert alt == d.alt, f"{notebook} shows {d.filename} with alt text {alt!r}, registered as {d.alt!r}"
        home = d.name[:2] if d.name[:2].isdigit() else README.name  # the course's own pictures: the README
        assert all(nb.startswith(home) for nb, _ in shown[d.filename]), f"{d.name} is shown outside {home}"
    unknown = sorted(set(shown) - {d.filename for d in registry.values()})
    assert not unknown, f"notebooks show pictures from figures/ that no code draws: {unknown}"


def test_every_animation_has_a_stepper_beside_it(registry):
    calls = {
        m.group(1)
        for path in NOTEBOOKS
        for cell in _cells(path)
        if cell["cell_type"] == "code"
        for m in re.finditer(r"diagrams\.stepper\(\s*[\"']([^\"']+)[\"']", _text(cell))
    }
    animated = {d.name for d in registry.values() if d.steps}
    assert animated <= calls, f"animations without a stepper cell in JupyterLab: {sorted(animated - calls)}"
    assert len(animated) >= MIN_ANIMATED, f"the course animates {len(animated)} diagrams, at least {MIN_ANIMATED}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_each_chapter_explains_its_mechanism_with_pictures(path, registry):
    chapter = path.name[:2]
    mine = [d for d in registry.values() if d.name.startswith(f"{chapter}-")]
    assert len(mine) >= MIN_PER_CHAPTER, f"{path.name} has {len(mine)} diagrams, at least {MIN_PER_CHAPTER}"


def test_registry_refuses_bad_definitions():
    with pytest.raises(ValueError, match="alt text"):
        diagrams.figure("99-x", alt=" ")(lambda: None)
    with pytest.raises(ValueError, match="steps"):
        diagrams.animation("99-y", alt="a", steps=1)
    with pytest.raises(ValueError, match="name"):
        diagrams.figure("bad name!", alt="a")(lambda: None)
    with pytest.raises(ValueError, match="animated diagrams"):
        diagrams.stepper("no-such-diagram")
    with pytest.raises(TypeError, match="name"):
        diagrams.stepper(5)
    with pytest.raises(ValueError, match="no diagram"):
        diagrams.write(["no-such-prefix"])
