"""tools/audit_notebook.py: each kind of finding is reported against the cell that caused it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nbformat
import pytest

_PATH = Path(__file__).resolve().parent.parent / "tools" / "audit_notebook.py"
_SPEC = importlib.util.spec_from_file_location("audit_notebook", _PATH)
audit_notebook = importlib.util.module_from_spec(_SPEC)
sys.modules["audit_notebook"] = audit_notebook
_SPEC.loader.exec_module(audit_notebook)

CELLS = [
    "import multiprocessing as mp, os, time",
    "q = mp.get_context('spawn').Queue()",  # 1: three semaphores stay alive after the cell
    "os.write(2, b'straight to the terminal\\n')",  # 2
    "p = mp.get_context('spawn').Process(target=time.sleep, args=(60,)); p.start()",  # 3: still running
    "x = sum(i * i for i in range(200_000))",  # 4: nothing left
    "p.terminate(); p.join(); del q, p",  # 5: cleans up
    # 6: gone within the grace: a queue its cell's own thread drops half a second after the cell ends
    "import threading; r = mp.get_context('spawn').Queue(); threading.Timer(0.5, globals().pop, ('r',)).start()",
]


@pytest.fixture
def notebook(tmp_path):
    path = tmp_path / "t.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS]), path)
    return path


def test_each_finding_is_reported_against_its_cell_and_counted(notebook):
    result = audit_notebook.audit(notebook)
    by_index = {cell.index: cell for cell in result.cells}
    assert len(by_index[1].shm_left) == 3 and all(name.startswith("sem.mp-") for name in by_index[1].shm_left)
    assert by_index[2].stderr == ["straight to the terminal"]
    assert len(by_index[3].children_left) == 1 and "spawn_main" in by_index[3].children_left[0]
    clean = [by_index[i] for i in (0, 4, 5, 6)]
    assert not any(c.shm_left or c.children_left or c.stderr or c.error for c in clean)
    assert audit_notebook.problems(result) == 5
    assert result.shm_after_shutdown == [] and result.cpu > 0
    text = audit_notebook.report(result)
    assert "cell   2 wrote to the terminal: straight to the terminal" in text


def test_bad_input_is_refused_with_the_argument_named(tmp_path, capsys):
    with pytest.raises(ValueError, match="start_method"):
        audit_notebook.audit(tmp_path / "t.ipynb", "fork")
    with pytest.raises(ValueError, match="notebook must be an existing"):
        audit_notebook.audit(tmp_path / "missing.ipynb")
    with pytest.raises(SystemExit):
        audit_notebook.main(["--top", "-1", str(tmp_path / "missing.ipynb")])
    assert "--top must be >= 0" in capsys.readouterr().err
