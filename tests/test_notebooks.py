"""Notebook hygiene: the committed notebooks are complete lessons, executed cleanly, in one order.

nbval checks that the stored outputs are still produced; these tests check that what is stored is fit to
be checked and to be taught from: executed top to bottom, no stray errors, no widget state, the lesson
structure of the course guide, reasons next to every ignored output, and no machine-specific paths.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
IDS = [path.name for path in NOTEBOOKS]


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _code_cells(nb: dict) -> list[dict]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def test_notebooks_exist_and_are_numbered_in_order():
    assert NOTEBOOKS, "no notebooks found"
    numbers = [int(path.name[:2]) for path in NOTEBOOKS]
    assert all(re.match(r"^\d\d_[a-z0-9_]+\.ipynb$", p.name) for p in NOTEBOOKS), IDS
    assert numbers == list(range(len(numbers))), f"notebooks must be numbered 00, 01, ... without gaps: {IDS}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_executed_top_to_bottom(path):
    counts = [c.get("execution_count") for c in _code_cells(_load(path))]
    assert counts == list(range(1, len(counts) + 1)), f"execution counts {counts}: regenerate with `make notebooks`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_error_outputs_outside_raises_cells(path):
    for i, cell in enumerate(_code_cells(_load(path))):
        if "NBVAL_RAISES_EXCEPTION" in _source(cell):
            continue
        errors = [o for o in cell.get("outputs", []) if o["output_type"] == "error"]
        assert not errors, f"code cell {i} stores an error: {errors[0].get('ename')}: {errors[0].get('evalue')}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_widget_state_or_volatile_metadata(path):
    nb = _load(path)
    assert "widgets" not in nb["metadata"], "widget state stored in the notebook metadata"
    assert nb["metadata"].get("kernelspec", {}).get("name") == "python3", "kernel must be python3"
    for i, cell in enumerate(nb["cells"]):
        assert "execution" not in cell.get("metadata", {}), f"cell {i} stores execution timestamps"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_lesson_structure(path):
    nb = _load(path)
    markdown = [_source(c) for c in nb["cells"] if c["cell_type"] == "markdown"]
    header = markdown[0] if markdown else ""
    assert header.lstrip().startswith("# "), "the first cell must be a markdown title"
    for word in ("**Questions**", "**Objectives**", "min"):
        assert word in header, f"the header cell must state {word}"
    assert any(m.lstrip().startswith("## Key points") for m in markdown), "a '## Key points' cell is missing"
    exercises = [m for m in markdown if m.lstrip().startswith("### Exercise")]
    assert len(exercises) >= 2, "at least two exercises"


@pytest.mark.parametrize("path", NOTEBOOKS[:-1], ids=IDS[:-1])
def test_key_points_link_to_the_next_notebook(path):
    following = NOTEBOOKS[NOTEBOOKS.index(path) + 1].name
    markdown = [_source(c) for c in _load(path)["cells"] if c["cell_type"] == "markdown"]
    key_points = [m for m in markdown if m.lstrip().startswith("## Key points")]
    assert key_points and "**Next:** [" in key_points[0] and f"]({following})" in key_points[0], (
        f"the Key points cell must end with a '**Next:**' link to {following}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_solutions_are_collapsed_and_checked(path):
    cells = _load(path)["cells"]
    solutions = [c for c in cells if c["cell_type"] == "code" and _source(c).lstrip().startswith("# Solution")]
    assert len(solutions) >= 2, "each exercise needs a solution cell starting with '# Solution'"
    for cell in solutions:
        assert cell["metadata"].get("jupyter", {}).get("source_hidden") is True, "solutions must be collapsed"
        assert "checks." in _source(cell), "a solution cell must run its checker"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_ignored_outputs_say_why(path):
    for i, cell in enumerate(_code_cells(_load(path))):
        lines = [line.strip() for line in _source(cell).splitlines()]
        for k, line in enumerate(lines):
            if line == "# NBVAL_IGNORE_OUTPUT":
                reason = lines[k + 1] if k + 1 < len(lines) else ""
                assert reason.startswith("#") and len(reason.lstrip("# ")) > 3, (
                    f"code cell {i}: put the reason on the comment line right below # NBVAL_IGNORE_OUTPUT"
                )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_checked_outputs_carry_no_machine_paths(path):
    for i, cell in enumerate(_code_cells(_load(path))):
        if "NBVAL_IGNORE_OUTPUT" in _source(cell):
            continue
        text = json.dumps(cell.get("outputs", []))
        for pattern in (r"/tmp/ipykernel_\d+", r"site-packages", r"/home/\w+", r"/work/"):
            assert not re.search(pattern, text), f"code cell {i} prints a machine-specific path ({pattern})"


def _bound_names(source: str) -> set[str]:
    """Names a cell binds at its top level by assignment, def or class (imports are left out: a solution
    that imports a module binds nothing the learner wrote)."""
    import ast

    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    tree = ast.parse("\n".join(lines))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if isinstance(node, ast.With):
                targets = [item.optional_vars for item in node.items]
            for target in filter(None, targets):
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _is_solution(cell: dict) -> bool:
    return cell["cell_type"] == "code" and _source(cell).lstrip().startswith("# Solution")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_solutions_never_overwrite_the_learners_names(path):
    """A solution defines `solution_*` names only, so opening it never replaces the learner's own answer;
    and no other cell uses a `solution_*` name, so a learner who never opens a solution loses nothing."""
    import ast

    for i, cell in enumerate(c for c in _load(path)["cells"] if c["cell_type"] == "code"):
        source = _source(cell)
        if _is_solution(cell):
            bad = sorted(n for n in _bound_names(source) if not n.startswith(("solution_", "_")))
            assert not bad, f"code cell {i} (a solution) binds {bad}: name them solution_*"
        else:
            lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            used = {n.id for n in ast.walk(ast.parse("\n".join(lines))) if isinstance(n, ast.Name)}
            borrowed = sorted(n for n in used if n.startswith("solution_"))
            assert not borrowed, f"code cell {i} uses {borrowed}, defined only in a collapsed solution"


# The multiprocessing primitives each chapter teaches, which a code cell of that chapter must call bare
# (on a target from the chapter's module) before helpers wrap them: learners must see the API itself.
BARE_PRIMITIVES = {
    "00_orientation.ipynb": ["Process(", "Queue(", ".get(timeout=", "queue.Empty", "Barrier(", "Pool("],
    "02_shared_tensors.ipynb": ["Process(", "Queue(", ".get(timeout=", "queue.Empty", "Event(", "Barrier(", "Lock("],
    "03_hogwild.ipynb": ["Process(", "Value(", "RLock(", "Event(", "Barrier("],
    "04_pool_vs_process.ipynb": ["Process(", "Queue(", ".get(timeout=", "queue.Empty", "Barrier(", "Pool("],
    "06_deadlocks_and_pitfalls.ipynb": ["Process(", "Queue(", ".get(timeout=", "queue.Empty", "Pool("],
}


@pytest.mark.parametrize("name", sorted(BARE_PRIMITIVES))
def test_each_chapter_calls_its_primitives_bare(name):
    code = "\n".join(_source(c) for c in _code_cells(_load(NOTEBOOKS[IDS.index(name)])))
    assert [p for p in BARE_PRIMITIVES[name] if p not in code] == []
