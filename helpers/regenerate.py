"""Execute notebooks top to bottom and store their outputs: `python -m helpers.regenerate [NOTEBOOK ...]`.

The committed notebooks carry the outputs nbval compares against, so they must come from one clean run
in the same environment the tests use: a fresh kernel of this interpreter (never a kernelspec found
elsewhere on the machine), the notebook's folder as working directory, execution counts 1..n.

What is stored is also what a learner sees on opening a notebook in JupyterLab, before running anything:
- `language_info` is the kernel's own, complete. JupyterLab 4 writes the kernel's `language_info` into
  the notebook as soon as the kernel starts and marks the notebook unsaved unless it is deep-equal to the
  stored one, so a cut-down copy put the unsaved-changes dot on every freshly opened notebook. ipykernel
  puts the interpreter's x.y.z in it; with `helpers.kernel` installed in the environment (`python -m
  helpers.kernel`), the kernel reports "3" instead, so learners on any Python 3 open a clean notebook.
- nbformat 4.5 with stable cell ids: an id, once stored, is kept; a cell without one (or with a
  duplicate or invalid one) gets an id derived from its position and source, so a regeneration without
  changes gives no diff. nbformat's own `upgrade`/`validate`/`normalize` draw random ids, so ids are
  assigned here before nbformat sees the notebook.
- No widget output in cells whose output nbval ignores: without the widget state (which is volatile and
  not stored), JupyterLab shows a widget output's plain-text fallback, a stale "0%|" bar or
  "interactive(children=...". Those cells store no widget output; they show their widgets when run.
  A cell whose output nbval checks must keep its widget outputs (nbval compares their text), so it is
  reported instead: split the checked printout from the widget.
- Volatile metadata is dropped: widget state and execution timestamps.

It refuses to run when the environment does not match requirements.txt (a pin added since the last
`make setup`): the outputs would be those of other versions, or of a missing package. `make notebooks`
sets the environment up first.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import re
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
REQUIREMENTS = NOTEBOOKS.parent / "requirements.txt"
CELL_TIMEOUT = 120  # seconds, as for nbval in pyproject.toml
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
_VALID_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # nbformat 4.5 schema for cell ids
_IGNORE_MARKERS = {"NBVAL_IGNORE_OUTPUT", "PYTEST_VALIDATE_IGNORE_OUTPUT", "NBVAL_SKIP"}  # as nbval reads them
_IGNORE_TAGS = {"nbval-ignore-output", "pytest-validate-ignore-output", "nbval-skip"}


class _ThisInterpreter(KernelSpecManager):
    """Resolve "python3" to ipykernel running on this interpreter, whatever else is installed."""

    def get_kernel_spec(self, kernel_name: str):  # type: ignore[override]
        import ipykernel.kernelspec

        if kernel_name == "python3":
            return self.kernel_spec_class(
                resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict()
            )
        return super().get_kernel_spec(kernel_name)


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _derived_id(index: int, cell: dict, taken: set[str]) -> str:
    """An id that depends only on the cell's position and content (so reruns agree), unique in `taken`."""
    digest = hashlib.sha256(f"{index}\0{cell.get('cell_type')}\0{_source(cell)}".encode()).hexdigest()
    candidate, n = digest[:12], 0
    while candidate in taken:
        n += 1
        candidate = f"{digest[:12]}-{n}"
    return candidate


def ensure_cell_ids(nb: dict) -> dict:
    """Make `nb` (a notebook as plain JSON data) nbformat 4.5 with a valid, unique id on every cell.

    Ids already stored are kept; only cells without a usable id (missing, invalid, or a repeat of an
    earlier cell's) get a derived one. Returns `nb`, changed in place.
    """
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise TypeError(f"nb must be a notebook's JSON dict with a 'cells' list, got {type(nb).__name__}")
    if nb.get("nbformat") != 4:
        raise ValueError(f"nb must be nbformat 4, got nbformat {nb.get('nbformat')!r}")
    taken: set[str] = set()
    for cell in nb["cells"]:
        cell_id = cell.get("id")
        if isinstance(cell_id, str) and _VALID_ID.match(cell_id) and cell_id not in taken:
            taken.add(cell_id)
        else:
            cell.pop("id", None)
    for index, cell in enumerate(nb["cells"]):
        if "id" not in cell:
            cell["id"] = _derived_id(index, cell, taken)
            taken.add(cell["id"])
    nb["nbformat_minor"] = max(int(nb.get("nbformat_minor", 0)), 5)
    return nb


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read a notebook with its cell ids kept (nbformat.read would draw random ones for missing ids)."""
    nb = ensure_cell_ids(json.loads(Path(path).read_text(encoding="utf-8")))
    # with every id present and unique, nbformat's validation has nothing to repair and keeps them
    return nbformat.reads(json.dumps(nb), as_version=nbformat.NO_CONVERT)


def output_ignored(cell: dict) -> bool:
    """True when nbval does not compare this cell's output (an ignore or skip marker or tag)."""
    for line in _source(cell).splitlines():
        line = line.strip()
        if line.startswith("#") and line.lstrip("#").strip() in _IGNORE_MARKERS:
            return True
    tags = cell.get("metadata", {}).get("tags", [])
    return isinstance(tags, list) and bool(_IGNORE_TAGS.intersection(tags))


def _is_widget_output(output: dict) -> bool:
    return WIDGET_MIME in output.get("data", {})


def strip_widget_outputs(nb: nbformat.NotebookNode) -> list[int]:
    """Remove widget outputs (ipywidgets, tqdm bars) from cells whose output nbval ignores.

    Returns the indices (in nb.cells) of cells whose output nbval checks and that still display a widget:
    their widget text must stay for nbval, so each of them has to be split (widget in an ignored cell).
    """
    checked_with_widgets = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not any(_is_widget_output(o) for o in cell.get("outputs", [])):
            continue
        if output_ignored(cell):
            cell.outputs = [o for o in cell.outputs if not _is_widget_output(o)]
        else:
            checked_with_widgets.append(index)
    return checked_with_widgets


def strip_volatile(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Remove what changes from run to run without meaning anything; keep the kernel's language_info."""
    nb.metadata.pop("widgets", None)
    nb.metadata.pop("orig_nbformat", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "markdown":
            cell.metadata.pop("collapsed", None)
    return nb


def regenerate(path: Path) -> tuple[float, list[int]]:
    """Execute one notebook in place; return the seconds it took and the checked cells showing widgets."""
    nb = read_notebook(path)
    km = KernelManager(kernel_name="python3", kernel_spec_manager=_ThisInterpreter())
    client = NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
        store_widget_state=False,
    )
    start = time.perf_counter()
    # nbclient shuts down only the kernels it created itself: without cleanup_kc, this kernel lived on until
    # the command ended, and its connection file (tmp*.json) stayed in the temporary folder.
    client.execute(cleanup_kc=True)  # also stores the kernel's language_info in nb.metadata
    seconds = time.perf_counter() - start
    checked_with_widgets = strip_widget_outputs(nb)
    nbformat.write(strip_volatile(nb), path)
    return seconds, checked_with_widgets


def stale_pins(requirements: Path = REQUIREMENTS) -> list[str]:
    """Pins of `requirements` (those whose markers hold here) that this environment does not satisfy."""
    from packaging.requirements import Requirement

    stale = []
    for raw in requirements.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        wanted = Requirement(line)
        if wanted.marker is not None and not wanted.marker.evaluate():
            continue
        try:
            have = importlib.metadata.version(wanted.name)
        except importlib.metadata.PackageNotFoundError:
            stale.append(f"{wanted.name}: not installed")
            continue
        if not wanted.specifier.contains(have, prereleases=True):
            stale.append(f"{wanted.name}: {have} installed, {wanted.specifier} wanted")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    for path in paths:
        if not path.is_file() or path.suffix != ".ipynb":
            parser.error(f"not a notebook: {path}")
    stale = stale_pins()
    if stale:
        print(
            "regenerate: this environment does not match requirements.txt (" + "; ".join(stale) + "): run "
            "`make setup` first (`make notebooks` does), or the stored outputs would come from other versions",
            file=sys.stderr,
        )
        return 2
    for path in paths:
        print(f"{path.name}: executing ...", flush=True)
        seconds, checked_with_widgets = regenerate(path)
        print(f"{path.name}: done in {seconds:.1f} s", flush=True)
        for index in checked_with_widgets:
            print(
                f"{path.name}: cell {index} shows a widget or progress bar in checked output; a learner who "
                "opens the notebook sees its stale text. Move the widget into a cell marked "
                "# NBVAL_IGNORE_OUTPUT.",
                file=sys.stderr,
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
