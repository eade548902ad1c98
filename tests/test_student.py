"""`make student`: the learner edition keeps every lesson cell and no solution (fast, structural checks).

Running the learner edition top to bottom, with its stored outputs checked by nbval, is the spawn pass of
`make test` (tests/passes.py).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import nbformat
import pytest

from helpers import student

NOTEBOOKS = sorted(student.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("edition") / "student"
    student.build(out)
    return out


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def test_every_notebook_is_written_with_a_readme(edition):
    assert sorted(p.name for p in edition.glob("*.ipynb")) == [p.name for p in NOTEBOOKS]
    assert "make student" in (edition / student.MARKER).read_text()


def test_the_edition_shows_the_same_pictures(edition):
    stored = sorted(p.name for p in (student.NOTEBOOKS / student.FIGURES).glob("*"))
    assert sorted(p.name for p in (edition / student.FIGURES).glob("*")) == stored


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_solutions_become_notes_and_everything_else_stays(edition, path):
    original, learner = _cells(path), _cells(edition / path.name)
    assert len(original) == len(learner)
    solutions = 0
    for before, after in zip(original, learner, strict=True):
        if student.is_solution(before):
            solutions += 1
            assert after["cell_type"] == "markdown" and _source(after) == student.NOTE
        else:
            assert (after["cell_type"], _source(after)) == (before["cell_type"], _source(before))
    assert solutions >= 2, "each notebook has at least two exercises"
    assert not any(student.is_solution(c) for c in learner)
    assert not any("solution_" in _source(c) for c in learner), "a cell outside a solution names a solution_*"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_outputs_are_cleared_and_checkers_kept(edition, path):
    learner = _cells(edition / path.name)
    code = [c for c in learner if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    checkers = [c for c in code if _source(c).lstrip().startswith("checks.")]
    assert len(checkers) == sum(_source(c) == student.NOTE for c in learner)
    nbformat.validate(nbformat.read(edition / path.name, as_version=4))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_cell_keeps_an_id(path):
    """nbformat 4.5 requires cell ids; nbformat.write only warns and makes up random ones."""
    original = nbformat.read(path, as_version=4)
    learner = student.learner_notebook(original)
    ids = [c.get("id") for c in learner.cells]
    assert None not in ids and len(set(ids)) == len(ids)
    solutions = [c["id"] for c in original.cells if student.is_solution(c)]
    assert [c["id"] for c in learner.cells if c.source == student.NOTE] == solutions  # a note takes its solution's
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nbformat.validate(learner)


def test_keep_outputs_keeps_the_stored_outputs(tmp_path):
    path = student.build(tmp_path / "kept", keep_outputs=True)[0]
    kept = [c for c in _cells(path) if c["cell_type"] == "code"]
    stored = [c for c in _cells(NOTEBOOKS[0]) if c["cell_type"] == "code" and not student.is_solution(c)]
    assert [c["outputs"] for c in kept] == [c["outputs"] for c in stored]


def test_recognises_solutions_by_structure_not_position():
    hidden = nbformat.v4.new_code_cell("x = 1", metadata={"jupyter": {"source_hidden": True}})
    named = nbformat.v4.new_code_cell("  # Solution: because\ny = 2")
    plain = nbformat.v4.new_code_cell("checks.thing(my_thing)")
    note = nbformat.v4.new_markdown_cell("# Solution")
    assert student.is_solution(hidden) and student.is_solution(named)
    assert not student.is_solution(plain) and not student.is_solution(note)
    with pytest.raises(TypeError, match="cell"):
        student.is_solution("# Solution")
    nb = nbformat.v4.new_notebook(cells=[plain, hidden, named])
    assert [c.cell_type for c in student.learner_notebook(nb).cells] == ["code", "markdown", "markdown"]


def test_rebuild_replaces_an_edition_but_never_a_foreign_folder(tmp_path):
    out = tmp_path / "student"
    student.build(out)
    (out / "stale.ipynb").write_text("{}")
    student.build(out)
    assert not (out / "stale.ipynb").exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="out:"):
        student.build(foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="out must differ"):
        student.build(student.NOTEBOOKS)
    with pytest.raises(ValueError, match="source"):
        student.build(tmp_path / "x", source=tmp_path)


def test_command_line(tmp_path, capsys):
    assert student.main(["--out", str(tmp_path / "s")]) == 0
    assert "outputs cleared" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        student.main(["--out", str(student.NOTEBOOKS)])


def _exercise(placeholder: str) -> nbformat.NotebookNode:
    cells = [
        nbformat.v4.new_markdown_cell("### Exercise 1: a task"),
        nbformat.v4.new_code_cell(placeholder),
        nbformat.v4.new_code_cell("checks.thing(my_thing)"),
        nbformat.v4.new_code_cell("# Solution\nsolution_thing = 2\nchecks.thing(solution_thing)"),
    ]
    for i, cell in enumerate(cells):
        cell["id"] = f"cell-{i}"
    return nbformat.v4.new_notebook(cells=cells)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_exercise_has_a_placeholder(path):
    nb = nbformat.read(path, as_version=4)
    found = student.placeholders(nb)
    assert len(found) >= sum(student.is_solution(c) for c in nb.cells)
    assert all(nb.cells[i].cell_type == "code" and not _source(nb.cells[i]).startswith("checks.") for i in found)


def test_a_handout_takes_the_committed_placeholders(tmp_path, monkeypatch):
    """An instructor who solved an exercise in notebooks/ must not hand the answer out (issue 31, point 19)."""
    committed, edited = _exercise("my_thing = None"), _exercise("my_thing = 2  # the answer")
    fixed, replaced = student.committed_placeholders(edited, committed)
    assert replaced == ["cell-1"] and _source(fixed.cells[1]) == "my_thing = None"
    assert _source(edited.cells[1]) == "my_thing = 2  # the answer"  # the working copy is left alone
    assert student.committed_placeholders(committed, committed)[1] == []

    source = tmp_path / "notebooks"
    source.mkdir()
    nbformat.write(edited, source / "00_x.ipynb")
    monkeypatch.setattr(student, "committed_notebook", lambda path: committed)
    lines: list[str] = []
    handout = student.build(tmp_path / "out", source=source, report=lines.append)[0]
    assert "my_thing = None" in handout.read_text() and "the answer" not in handout.read_text()
    assert len(lines) == 1 and "00_x.ipynb" in lines[0] and "cell-1" in lines[0]
    tested = student.build(tmp_path / "kept", source=source, keep_outputs=True, report=lines.append)[0]
    assert "the answer" in tested.read_text() and len(lines) == 1  # the test edition checks the working copy


def test_committed_notebook_reads_git_head():
    head = student.committed_notebook(NOTEBOOKS[0])
    if head is None:
        pytest.skip("not a git checkout with the notebooks committed")
    assert [c.get("id") for c in head.cells][:3] == [c.get("id") for c in nbformat.read(NOTEBOOKS[0], 4).cells][:3]
    assert student.committed_notebook(student.REPO / "no_such.ipynb") is None
