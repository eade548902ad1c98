"""The learner edition, executed top to bottom with nbclient (slow: about one pass of the notebooks).

Not collected by a plain `pytest` (the name does not start with `test_`); select it by path:
`pytest tests/run_student.py`, and under spawn with `PYTHONPATH=tests/force_spawn`. For every notebook of
`make student`'s edition: no cell raises except those marked to (`NBVAL_RAISES_EXCEPTION`), every checker
prints "Not yet" on the unedited placeholders, and no cell outlives its time-out.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from helpers import student
from helpers.regenerate import CELL_TIMEOUT, _ThisInterpreter

NOTEBOOKS = sorted(student.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
CHECKER = re.compile(r"^\s*checks\.\w+\(", re.MULTILINE)


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "student"
    student.build(out)
    return out


def _text(outputs: list) -> str:
    parts = []
    for output in outputs:
        if output.output_type == "stream":
            parts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            parts.append(output.data.get("text/plain", ""))
        elif output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
    return "".join(parts)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", [p.name for p in NOTEBOOKS])
def test_learner_edition_runs_and_every_checker_says_not_yet(edition, name):
    path = edition / name
    nb = nbformat.read(path, as_version=4)
    km = KernelManager(kernel_name="python3", kernel_spec_manager=_ThisInterpreter())
    client = NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT,
        allow_errors=True,  # cells marked NBVAL_RAISES_EXCEPTION raise on purpose; the rest are checked below
        resources={"metadata": {"path": str(edition)}},
        record_timing=False,
        store_widget_state=False,
    )
    try:
        client.execute()
    finally:
        if km.has_kernel:  # nbclient shuts down only kernels it started itself, not one we handed it
            km.shutdown_kernel()
    checkers = 0
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if "NBVAL_RAISES_EXCEPTION" not in cell.source:
            assert not errors, f"cell {index} raised {errors[0].ename}: {errors[0].evalue}"
        if CHECKER.search(cell.source):
            checkers += 1
            said = _text(cell.outputs)
            assert "Not yet" in said and "Correct" not in said, f"checker cell {index} printed: {said[:300]!r}"
    notes = sum(c.cell_type == "markdown" and c.source == student.NOTE for c in nb.cells)
    assert checkers == notes, f"{checkers} checker cells for {notes} removed solutions"
