"""The course's headline measurements, headless: `python -m helpers.bench [NAME ...] [--json] [--check]`.

Each figure is a ratio of two times measured side by side in one run (absolute times on a shared laptop
or CI machine mean little), with the physical limit it is compared to and, where a chapter promises one,
the floor it must reach. Processes are timed from a barrier after they started; start-up is reported
beside the ratio. The notebooks call the same functions with smaller sizes for their plots.

Add a figure by writing a function that returns a `Figure` and registering it in `FIGURES`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from helpers import orientation
from helpers.environment import default_start_method, usable_cores

__all__ = ["Figure", "FIGURES", "threads_vs_processes", "spawn_vs_fork_start", "main"]


@dataclass
class Figure:
    """One measured ratio. `floor` is the minimum a chapter promises on an idle machine, if any."""

    ratio: float
    limit: float | None
    what: str
    floor: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def meets_floor(self) -> bool | None:
        return None if self.floor is None else self.ratio >= self.floor


def threads_vs_processes(n: int = 2_000_000, rounds: int = 3) -> Figure:
    """Pure-Python work on all usable cores: seconds on threads / seconds on processes (median of rounds)."""
    runs = [orientation.threads_vs_processes(n=n) for _ in range(rounds)]
    threads = statistics.median(r.threads for r in runs)
    processes = statistics.median(r.processes for r in runs)
    workers = runs[0].workers
    return Figure(
        ratio=threads / processes,
        limit=float(workers),
        floor=0.8 * workers,
        what=f"pure-Python CPU work, {workers} workers: time on threads / time on processes",
        details={
            "one_worker_s": statistics.median(r.one_worker for r in runs),
            "threads_s": threads,
            "processes_s": processes,
            "process_startup_s": statistics.median(r.process_startup for r in runs),
            "start_method": runs[0].start_method,
            "rounds": rounds,
        },
    )


def spawn_vs_fork_start(repeats: int = 3) -> Figure:
    """Start-up of a child that imports torch: spawn / fork (median of `repeats` starts each)."""
    methods = [m for m in ("fork", "spawn", "forkserver") if m in mp.get_all_start_methods()]
    if "fork" not in methods:
        raise RuntimeError("spawn_vs_fork_start needs the fork start method (Linux or macOS)")
    cost = orientation.start_cost(methods, repeats=repeats)
    return Figure(
        ratio=cost["spawn"] / cost["fork"],
        limit=None,
        what="start-up of a child that imports torch: spawn / fork (no target; shows why it matters)",
        details={f"{method}_s": seconds for method, seconds in cost.items()},
    )


FIGURES: dict[str, Callable[[], Figure]] = {
    "threads_vs_processes": threads_vs_processes,
    "spawn_vs_fork_start": spawn_vs_fork_start,
}


def _table(results: dict[str, Figure]) -> str:
    rows = [("figure", "ratio", "limit", "floor", "ok", "what")]
    for name, fig in results.items():
        ok = {None: "-", True: "yes", False: "NO"}[fig.meets_floor]
        rows.append(
            (
                name,
                f"{fig.ratio:.2f}",
                "-" if fig.limit is None else f"{fig.limit:g}",
                "-" if fig.floor is None else f"{fig.floor:.2f}",
                ok,
                fig.what,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row[:5], widths, strict=True)) + "  " + row[5]
        for row in rows
    ]
    for name, fig in results.items():
        details = ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in fig.details.items())
        lines.append(f"  {name}: {details}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"figures to run (default: all): {', '.join(FIGURES)}")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--list", action="store_true", help="list the figures and exit")
    parser.add_argument("--check", action="store_true", help="exit 1 when a figure misses its floor")
    args = parser.parse_args(argv)
    if args.list:
        for name, fn in FIGURES.items():
            print(f"{name}: {(fn.__doc__ or 'no description').strip().splitlines()[0]}")
        return 0
    unknown = [name for name in args.names if name not in FIGURES]
    if unknown:
        parser.error(f"unknown figure(s) {', '.join(unknown)}; choose from {', '.join(FIGURES)}")
    names = args.names or list(FIGURES)
    context = f"start method: {default_start_method()}, usable cores: {usable_cores()}"
    print(f"helpers.bench: {context}", file=sys.stderr)
    results = {}
    for name in names:
        print(f"  running {name} ...", file=sys.stderr, flush=True)
        results[name] = FIGURES[name]()
    if args.json:
        payload = {name: {**asdict(fig), "meets_floor": fig.meets_floor} for name, fig in results.items()}
        print(json.dumps(payload, indent=2))
    else:
        print(_table(results))
    missed = [name for name, fig in results.items() if fig.meets_floor is False]
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
