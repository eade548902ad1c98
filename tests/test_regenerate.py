import copy
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from helpers.regenerate import (
    WIDGET_MIME,
    ensure_cell_ids,
    output_ignored,
    read_notebook,
    stale_pins,
    strip_volatile,
    strip_widget_outputs,
)

KERNEL_LANGUAGE_INFO = {
    "name": "python",
    "version": "3.11.7",
    "mimetype": "text/x-python",
    "codemirror_mode": {"name": "ipython", "version": 3},
    "pygments_lexer": "ipython3",
    "nbconvert_exporter": "python",
    "file_extension": ".py",
}


def _plain_notebook(*cells: dict, minor: int = 4) -> dict:
    """A notebook as JSON data, as an older regeneration stored it (no ids, nbformat 4.4)."""
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": minor}


def _code(source: str, **extra) -> dict:
    return {"cell_type": "code", "source": source, "metadata": {}, "outputs": [], "execution_count": None, **extra}


def _widget_output(text: str) -> dict:
    return new_output(
        "display_data",
        data={WIDGET_MIME: {"model_id": "abc", "version_major": 2, "version_minor": 0}, "text/plain": text},
    )


def test_strip_volatile_removes_widget_state_and_timestamps_but_keeps_the_kernels_language_info():
    nb = new_notebook(cells=[new_code_cell("1")])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    nb.metadata["language_info"] = dict(KERNEL_LANGUAGE_INFO)
    nb.cells[0].metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00"}
    out = strip_volatile(nb)
    assert "widgets" not in out.metadata
    # JupyterLab marks the notebook unsaved on open unless this is deep-equal to the kernel's own
    assert out.metadata["language_info"] == KERNEL_LANGUAGE_INFO
    assert out.metadata["kernelspec"]["name"] == "python3"
    assert "execution" not in out.cells[0].metadata
    nbformat.validate(out)


def test_ids_are_assigned_once_and_kept():
    nb = ensure_cell_ids(_plain_notebook(_code("a = 1"), {"cell_type": "markdown", "source": "# t", "metadata": {}}))
    assert nb["nbformat_minor"] == 5
    ids = [c["id"] for c in nb["cells"]]
    assert len(set(ids)) == 2
    again = ensure_cell_ids(copy.deepcopy(nb))
    assert [c["id"] for c in again["cells"]] == ids
    # a cell inserted later gets a new id; the others keep theirs even though their positions moved
    nb["cells"].insert(0, _code("import os"))
    ensure_cell_ids(nb)
    assert [c["id"] for c in nb["cells"][1:]] == ids
    assert nb["cells"][0]["id"] not in ids
    nbformat.validate(nbformat.from_dict(nb))


def test_ids_are_the_same_on_every_run_for_the_same_notebook():
    """nbformat's upgrade and normalize draw random ids; ours depend only on the notebook."""
    first = ensure_cell_ids(_plain_notebook(_code("x"), _code("x"), _code("y")))
    second = ensure_cell_ids(_plain_notebook(_code("x"), _code("x"), _code("y")))
    assert [c["id"] for c in first["cells"]] == [c["id"] for c in second["cells"]]
    assert len({c["id"] for c in first["cells"]}) == 3  # same source twice still gives two ids


def test_duplicate_and_invalid_ids_are_replaced_and_the_first_holder_keeps_its_id():
    nb = ensure_cell_ids(
        _plain_notebook(_code("a", id="keep-me"), _code("b", id="keep-me"), _code("c", id="bad id!"), minor=5)
    )
    ids = [c["id"] for c in nb["cells"]]
    assert ids[0] == "keep-me"
    assert len(set(ids)) == 3
    assert ids[2] != "bad id!"
    nbformat.validate(nbformat.from_dict(nb))


def test_ensure_cell_ids_rejects_what_is_not_a_v4_notebook():
    with pytest.raises(TypeError, match="nb"):
        ensure_cell_ids(["not", "a", "notebook"])
    with pytest.raises(ValueError, match="nbformat"):
        ensure_cell_ids({"cells": [], "metadata": {}, "nbformat": 3, "nbformat_minor": 0})


def test_read_notebook_keeps_stored_ids_and_reading_twice_agrees(tmp_path):
    path = tmp_path / "nb.ipynb"
    stored = _plain_notebook(_code("a", id="first"), _code("b"), minor=5)
    path.write_text(json.dumps(stored))
    one, two = read_notebook(path), read_notebook(path)
    assert one.cells[0].id == "first"
    assert [c.id for c in one.cells] == [c.id for c in two.cells]
    nbformat.write(one, path)
    assert [c.id for c in read_notebook(path).cells] == [c.id for c in one.cells]


def test_output_ignored_reads_markers_as_nbval_does():
    assert output_ignored(new_code_cell("# NBVAL_IGNORE_OUTPUT\n# timings vary\nx"))
    assert output_ignored(new_code_cell("x", metadata={"tags": ["nbval-ignore-output"]}))
    assert output_ignored(new_code_cell("# NBVAL_SKIP\nx"))
    assert not output_ignored(new_code_cell("x  # NBVAL_IGNORE_OUTPUT"))  # nbval wants it alone on its line
    assert not output_ignored(new_code_cell("print('NBVAL_IGNORE_OUTPUT')"))
    assert not output_ignored(new_markdown_cell("text"))


def test_widget_outputs_are_removed_only_where_nbval_ignores_the_output():
    ignored = new_code_cell("# NBVAL_IGNORE_OUTPUT\n# a live progress bar\nrun()")
    ignored.outputs = [_widget_output("results:   0%|          | 0/6"), new_output("stream", text="[9, 0]\n")]
    checked = new_code_cell("sweep()")
    checked.outputs = [_widget_output("num_workers:   0%|          | 0/4"), new_output("stream", text="ok\n")]
    plain = new_code_cell("print(1)")
    plain.outputs = [new_output("stream", text="1\n")]
    nb = new_notebook(cells=[new_markdown_cell("# t"), ignored, checked, plain])
    before_checked = copy.deepcopy(checked.outputs)
    assert strip_widget_outputs(nb) == [2]
    assert nb.cells[1].outputs == [new_output("stream", text="[9, 0]\n")]
    assert nb.cells[2].outputs == before_checked  # nbval compares their text: kept, and reported
    assert nb.cells[3].outputs == [new_output("stream", text="1\n")]
    assert strip_widget_outputs(nb) == [2]  # nothing widget-like comes back on a second pass


def test_read_notebook_joins_source_lines_as_nbformat_does(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(_plain_notebook(_code(["a = 1\n", "b = 2"]))))
    assert read_notebook(path).cells[0].source == "a = 1\nb = 2"


def test_stale_pins_name_what_this_environment_lacks(tmp_path):
    """A pin added since the last `make setup` must stop a regeneration, not store a missing package's outputs."""
    import importlib.metadata

    have = importlib.metadata.version("nbformat")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        f"# a comment\nnbformat=={have}\nno-such-package-here==1.0\nnbclient==0.0.1\n"
        'pytest==0.0.1 ; python_version < "3.0"\n'
    )
    assert stale_pins(requirements) == [
        "no-such-package-here: not installed",
        f"nbclient: {importlib.metadata.version('nbclient')} installed, ==0.0.1 wanted",
    ]


def test_the_course_environment_matches_its_requirements():
    assert stale_pins() == []


def test_regenerate_runs_a_notebook_and_leaves_no_kernel_or_connection_file(tmp_path):
    import tempfile
    from pathlib import Path

    import psutil

    from helpers.regenerate import regenerate

    path = tmp_path / "tiny.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("print(6 * 7)")]), path)
    connection_files = set(Path(tempfile.gettempdir()).glob("tmp*.json"))
    children = set(psutil.Process().children(recursive=True))
    seconds, widgets = regenerate(path)
    assert seconds > 0 and widgets == []
    assert nbformat.read(path, as_version=4).cells[0].outputs[0]["text"] == "42\n"
    assert set(Path(tempfile.gettempdir()).glob("tmp*.json")) == connection_files
    assert [p for p in psutil.Process().children(recursive=True) if p not in children and p.is_running()] == []


@pytest.mark.parametrize("long_tmpdir", [False, True], ids=["unix-sockets", "tcp-for-a-long-tmpdir"])
def test_nbval_kernels_talk_over_unix_sockets_that_go_with_them(long_tmpdir, monkeypatch):
    # conftest.py gives nbval's kernels Unix sockets: TCP ports picked before the kernel binds them can be
    # taken meanwhile by any process of the suite (a kernel died of it once in `make test`). A socket's
    # path is limited to about 100 bytes, so a temporary folder with a longer name keeps TCP.
    import shutil
    import tempfile
    from pathlib import Path

    import conftest

    folder = Path(tempfile.mkdtemp(prefix="ipc-"))  # not tmp_path: pytest's is too long a name here
    inside = folder / ("x" * 100 if long_tmpdir else "")
    inside.mkdir(exist_ok=True)
    monkeypatch.setattr(conftest, "_IPC_DIR", str(inside))
    km, kc = conftest._start_kernel_on_unix_sockets(kernel_name=":nbval-parent-env")
    try:
        assert km.transport == ("tcp" if long_tmpdir else "ipc")
        assert sorted(p.name for p in inside.iterdir()) == ([] if long_tmpdir else [f"kernel-{n}" for n in range(1, 6)])
        msg_id = kc.execute("print(6 * 7)")
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"]["msg_id"] != msg_id:  # a reply to the start's kernel_info may come first
            reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
        left = list(inside.iterdir())
        shutil.rmtree(folder)
    assert left == []
