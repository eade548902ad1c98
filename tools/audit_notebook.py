"""Run notebooks cell by cell and report what each cell costs and leaves: `python tools/audit_notebook.py
[--start-method spawn|forkserver] [--top N] NOTEBOOK...`.

Why: nbval says whether a notebook still prints what it stored, not where its CPU goes (`make test` is
CPU-bound, so that is where its time goes), nor what a cell leaves behind that nbval cannot see: a
multiprocessing semaphore kept alive after its cell (under spawn and forkserver each is a file in
/dev/shm), a child process still running, or text a child writes to the terminal that runs JupyterLab
(not to the notebook). Each of those has been found this way.

Per code cell it records the CPU seconds of the kernel and every process under it (children that have
ended count through the parent that waited for them), the wall seconds, the `sem.mp-*`/`psm_*` files
created in /dev/shm and still there 2 s after the cell ends, the kernel's children still alive then (other
than multiprocessing's resource tracker and forkserver), and what the kernel's process tree wrote to its
stderr. At the end it times the kernel's shutdown and reports what it wrote then. Run one audit at a
time: /dev/shm is shared, so another program's files would be counted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

from helpers import watchdog
from helpers.timing import tree_cpu

ROOT = Path(__file__).resolve().parent.parent
SHM = Path("/dev/shm")
FORCE = {"spawn": ROOT / "tests" / "force_spawn", "forkserver": ROOT / "tests" / "force_forkserver"}
# multiprocessing's own helpers, which live as long as the kernel by design
HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
# seconds a cell's new files and children may take to go before they count as left behind
GRACE = 2.0
# ipykernel's own lines on stderr, which say nothing about the notebook
KERNEL_NOISE = ("Kernel is running over TCP without encryption",)


@dataclass
class Cell:
    index: int
    cpu: float
    wall: float
    shm_left: list[str] = field(default_factory=list)
    children_left: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)
    error: str = ""


@dataclass
class Audit:
    notebook: str
    cells: list[Cell]
    start_cpu: float
    shutdown_seconds: float
    shutdown_stderr: list[str]
    shm_after_shutdown: list[str]

    @property
    def cpu(self) -> float:
        return self.start_cpu + sum(c.cpu for c in self.cells)


def shm_files() -> set[str]:
    """multiprocessing's semaphores and shared-memory blocks, and torch's shared-memory files."""
    torch_files = {p.name for p in SHM.glob("torch_*")} if SHM.is_dir() else set()
    return watchdog.multiprocessing_names() | torch_files


def children_left(pid: int) -> list[str]:
    """The kernel's live descendants ("pid command"), other than multiprocessing's resource tracker and
    forkserver (and what those two started)."""
    try:
        kernel = psutil.Process(pid)
        kids = kernel.children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    left = []
    helpers = set()
    for kid in kids:
        try:
            cmd = " ".join(kid.cmdline())
            if any(h in cmd for h in HELPERS):
                helpers.add(kid.pid)
                continue
            if kid.ppid() in helpers or kid.status() == psutil.STATUS_ZOMBIE:
                continue
            left.append(f"{kid.pid} {cmd[:100]}")
        except psutil.NoSuchProcess:
            continue
    return left


def left_behind(
    pid: int, shm_before: set[str], kids_before: set[str], grace: float = GRACE
) -> tuple[list[str], list[str]]:
    """The multiprocessing files and live children a cell left, counted only if still there `grace` seconds
    after it ended: a child may still be exiting, a finalizer still unlinking, and that is not a leak."""
    deadline = time.monotonic() + grace
    while True:
        shm = sorted(shm_files() - shm_before)
        kids = [kid for kid in children_left(pid) if kid not in kids_before]
        if not (shm or kids) or time.monotonic() >= deadline:
            return shm, kids
        time.sleep(0.1)


def new_lines(path: Path, seen: int) -> tuple[list[str], int]:
    text = path.read_text(errors="replace")
    lines = [line for line in text[seen:].splitlines() if line.strip() and not any(n in line for n in KERNEL_NOISE)]
    return lines, len(text)


def audit(notebook: Path, start_method: str | None = None, timeout: float = 600.0) -> Audit:
    """Run `notebook` in a fresh kernel, cell by cell, with `start_method` as the platform's default."""
    if start_method not in (None, *FORCE):
        raise ValueError(f"start_method must be None, 'spawn' or 'forkserver', got {start_method!r}")
    if not Path(notebook).is_file():
        raise ValueError(f"notebook must be an existing .ipynb file, got {str(notebook)!r}")
    nb = nbformat.read(notebook, as_version=4)
    env = dict(os.environ)
    if start_method:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FORCE[start_method]), env.get("PYTHONPATH")]))
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(Path(notebook).parent)}}
    )
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="audit-") as tmp:
        err_path = Path(tmp) / "kernel-stderr.txt"
        env["TMPDIR"] = tmp
        with err_path.open("w") as err:
            with client.setup_kernel(env=env, stderr=err):
                pid = client.km.provisioner.process.pid
                start_cpu = tree_cpu(pid)
                seen = 0
                for index, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    before_shm, before_kids = shm_files(), set(children_left(pid))
                    c0, w0 = tree_cpu(pid), time.monotonic()
                    error = ""
                    try:
                        client.execute_cell(cell, index)
                    except Exception as exc:  # noqa: BLE001 - reported with the cell, the audit goes on
                        error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
                    record = Cell(index, tree_cpu(pid) - c0, time.monotonic() - w0, error=error)
                    record.shm_left, record.children_left = left_behind(pid, before_shm, before_kids)
                    record.stderr, seen = new_lines(err_path, seen)
                    cells.append(record)
                shm_before_shutdown = shm_files()
                t_shutdown = time.monotonic()
            shutdown = time.monotonic() - t_shutdown
        shutdown_stderr, _ = new_lines(err_path, seen)
    return Audit(str(notebook), cells, start_cpu, shutdown, shutdown_stderr, sorted(shm_files() & shm_before_shutdown))


def report(result: Audit, top: int = 8) -> str:
    lines = [
        f"{result.notebook}: {result.cpu:.1f} s CPU in {len(result.cells)} code cells, "
        f"kernel shutdown {result.shutdown_seconds:.1f} s"
    ]
    for cell in sorted(result.cells, key=lambda c: -c.cpu)[:top]:
        lines.append(f"  cell {cell.index:3}: {cell.cpu:6.1f} s CPU {cell.wall:6.1f} s wall")
    for cell in result.cells:
        for what, items in (
            ("error", [cell.error] if cell.error else []),
            ("left in /dev/shm", cell.shm_left),
            ("processes left", cell.children_left),
            ("wrote to the terminal", cell.stderr),
        ):
            if items:
                lines.append(f"  cell {cell.index:3} {what}: " + "; ".join(items[:6]))
    if result.shutdown_stderr:
        lines.append("  at shutdown, wrote to the terminal: " + "; ".join(result.shutdown_stderr[:6]))
    if result.shm_after_shutdown:
        lines.append("  left in /dev/shm after shutdown: " + ", ".join(result.shm_after_shutdown))
    return "\n".join(lines)


def problems(result: Audit) -> int:
    """How many findings the audit has (errors, leftovers, terminal output): its exit status counts them."""
    found = sum(bool(c.error) + len(c.shm_left) + len(c.children_left) + len(c.stderr) for c in result.cells)
    return found + len(result.shutdown_stderr) + len(result.shm_after_shutdown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--start-method", choices=sorted(FORCE), default=None, help="the default to force")
    parser.add_argument("--top", type=int, default=8, help="how many of the costliest cells to list")
    args = parser.parse_args(argv)
    if args.top < 0:
        parser.error(f"--top must be >= 0, got {args.top}")
    total, found = 0.0, 0
    for notebook in args.notebooks:
        try:
            result = audit(notebook, args.start_method)
        except ValueError as exc:
            parser.error(str(exc))
        print(report(result, args.top), flush=True)
        total += result.cpu
        found += problems(result)
    print(f"{len(args.notebooks)} notebook(s): {total:.0f} s CPU, {found} finding(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
