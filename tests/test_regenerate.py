import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from helpers.regenerate import strip_volatile


def test_strip_volatile_removes_widget_state_timestamps_and_versions():
    nb = new_notebook(cells=[new_code_cell("1")])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    nb.cells[0].metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00"}
    out = strip_volatile(nb)
    assert "widgets" not in out.metadata
    assert out.metadata["language_info"] == {"name": "python"}
    assert out.metadata["kernelspec"]["name"] == "python3"
    assert "execution" not in out.cells[0].metadata
    nbformat.validate(out)
