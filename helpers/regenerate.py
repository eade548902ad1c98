"""Execute notebooks top to bottom and store their outputs: `python -m helpers.regenerate [NOTEBOOK ...]`.

The committed notebooks carry the outputs nbval compares against, so they must come from one clean run
in the same environment the tests use: a fresh kernel of this interpreter (never a kernelspec found
elsewhere on the machine), the notebook's folder as working directory, execution counts 1..n. Volatile
metadata is dropped so that a regeneration without changes gives no diff: widget state, execution
timestamps and the exact Python version.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
CELL_TIMEOUT = 120  # seconds, as for nbval in pyproject.toml


class _ThisInterpreter(KernelSpecManager):
    """Resolve "python3" to ipykernel running on this interpreter, whatever else is installed."""

    def get_kernel_spec(self, kernel_name: str):  # type: ignore[override]
        import ipykernel.kernelspec

        if kernel_name == "python3":
            return self.kernel_spec_class(
                resource_dir=ipykernel.kernelspec.RESOURCES, **ipykernel.kernelspec.get_kernel_dict()
            )
        return super().get_kernel_spec(kernel_name)


def strip_volatile(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Remove what changes from run to run without meaning anything."""
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("collapsed", None) if cell.cell_type == "markdown" else None
        if "id" in cell:
            cell.pop("id")
    nb.nbformat, nb.nbformat_minor = 4, 4
    return nb


def regenerate(path: Path) -> float:
    """Execute one notebook in place; return the seconds it took."""
    nb = nbformat.read(path, as_version=4)
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
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(strip_volatile(nb), path)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    for path in paths:
        if not path.is_file() or path.suffix != ".ipynb":
            parser.error(f"not a notebook: {path}")
    for path in paths:
        print(f"{path.name}: executing ...", flush=True)
        seconds = regenerate(path)
        print(f"{path.name}: done in {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
