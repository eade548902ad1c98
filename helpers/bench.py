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
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from helpers import orientation
from helpers.environment import default_start_method, usable_cores

__all__ = [
    "Figure",
    "FIGURES",
    "threads_vs_processes",
    "spawn_vs_fork_start",
    "pool_chunksize",
    "pool_io_scaling",
    "ddp_speedup",
    "ring_allreduce",
    "main",
]


@dataclass
class Figure:
    """One measured ratio. `floor` is the minimum a chapter promises on an idle machine, if any."""

    ratio: float
    limit: float | None
    what: str
    floor: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    conditions: dict[str, bool] = field(default_factory=dict)  # what must hold besides the ratio

    @property
    def meets_floor(self) -> bool | None:
        if self.floor is None and not self.conditions:
            return None
        return (self.floor is None or self.ratio >= self.floor) and all(self.conditions.values())


def threads_vs_processes(n: int = 2_000_000, rounds: int = 5) -> Figure:
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


def dataloader_io(workers: int = 8, delay: float = 0.01, batch_size: int = 4) -> Figure:
    """I/O-bound dataset (`delay` s of waiting per sample): samples/s with `workers` workers / with 0."""
    from helpers import loading

    rounds = 8  # batches per worker in the timed part
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # more workers than cores, on purpose
    base = loading.measure_throughput(loading.SleepyDataset(n=24 * batch_size, delay=delay), 0, batch_size)
    many_ds = loading.SleepyDataset(n=(rounds + 1) * workers * batch_size, delay=delay)
    many = loading.measure_throughput(many_ds, workers, batch_size)
    return Figure(
        ratio=many.samples_per_s / base.samples_per_s,
        limit=float(workers),
        floor=6.0,
        what=f"I/O-bound loading ({delay * 1000:g} ms wait per sample): {workers} workers / num_workers=0",
        details={
            "samples_per_s_0": base.samples_per_s,
            f"samples_per_s_{workers}": many.samples_per_s,
            f"startup_s_{workers}": many.startup,
            "start_method": default_start_method(),
        },
    )


def _light_step(model: Any, optimizer: Any) -> Callable[[Any], None]:

    def step(batch: Any) -> None:
        optimizer.zero_grad()
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()

    return step


def dataloader_cpu(work: int = 20_000, batch_size: int = 8, batches: int = 40) -> Figure:
    """Pure-Python per-sample work plus a light training step, main at 1 torch thread: samples/s of the
    best of 1..usable-cores workers / num_workers=0. Torch-op augmentation reported beside it."""
    import torch

    from helpers import loading

    cores = usable_cores()
    threads = torch.get_num_threads()
    model = torch.nn.Linear(8, 1)
    step = _light_step(model, torch.optim.SGD(model.parameters(), lr=0.01))
    try:
        torch.set_num_threads(1)
        python_ds = loading.BusyDataset(n=(batches + cores) * batch_size, work=work)
        results = {n: loading.measure_throughput(python_ds, n, batch_size, step=step) for n in range(cores + 1)}
        torch.set_num_threads(threads)  # torch-op augmentation: the main process gets every core
        torch_ds = loading.TorchAugmentDataset(n=(batches + cores) * batch_size)
        torch_results = {n: loading.measure_throughput(torch_ds, n, batch_size, step=step) for n in range(cores + 1)}
    finally:
        torch.set_num_threads(threads)
    best = max(range(1, cores + 1), key=lambda n: results[n].samples_per_s)
    torch_best = max(range(1, cores + 1), key=lambda n: torch_results[n].samples_per_s)
    # Torch-op augmentation has no floor: how much workers add depends on how well the ops split over
    # the main process's threads, which varies with op size and from run to run.
    return Figure(
        ratio=results[best].samples_per_s / results[0].samples_per_s,
        limit=float(cores),
        floor=0.75 * cores,
        what="pure-Python augmentation + light step, main at 1 thread: best 1..cores workers / 0 workers",
        details={
            "best_num_workers": best,
            "samples_per_s_0": results[0].samples_per_s,
            "samples_per_s_best": results[best].samples_per_s,
            "startup_s_best": results[best].startup,
            "torch_ops_ratio_main_all_threads": torch_results[torch_best].samples_per_s
            / torch_results[0].samples_per_s,
            "torch_ops_best_num_workers": torch_best,
            "start_method": default_start_method(),
        },
    )


def queue_shared_vs_pickle(nbytes: int = 128 * 2**20, repeats: int = 3) -> Figure:
    """Hand-off of `nbytes` to another process that touches one element: pickled NumPy through
    multiprocessing.Queue / an already-shared tensor through a torch.multiprocessing queue."""
    from helpers import sharing

    touch = sharing.handoff_seconds(nbytes, repeats=repeats, mode="touch")
    summed = sharing.handoff_seconds(nbytes, repeats=repeats, mode="sum")
    return Figure(
        ratio=touch.pickled_numpy / touch.tensor_shared,
        limit=None,
        floor=50.0,
        what=f"hand-off of {nbytes / 2**20:g} MB, consumer touches one element: pickled NumPy / shared tensor",
        details={
            "pickled_numpy_s": touch.pickled_numpy,
            "tensor_not_shared_s": touch.tensor_not_shared,
            "tensor_shared_s": touch.tensor_shared,
            "ratio_when_consumer_sums_all": summed.pickled_numpy / summed.tensor_shared,
            "start_method": default_start_method(),
        },
    )


def hogwild_speedup(steps: int = 12_000) -> Figure:
    """Hogwild, one process per usable core at 1 thread each: samples/s / one process at 1 thread, for the
    same budget of steps; the test accuracy of both must agree within 2 points."""
    from helpers import hogwild

    cores = usable_cores()
    task = hogwild.make_task()
    runs = hogwild.compare([1, cores], hogwild.Config(steps=steps, threads=1), task=task)
    single, many = runs[1], runs[cores]
    # A forked child cannot use several OpenMP threads once its parent has: the threaded baseline spawns.
    threaded = hogwild.compare([1], hogwild.Config(steps=steps, threads=cores), task=task, start_method="spawn")[1]
    gap = abs(many.accuracy - single.accuracy)
    return Figure(
        ratio=many.samples_per_s / single.samples_per_s,
        limit=float(cores),
        floor=0.75 * cores,
        what=f"Hogwild, {cores} processes x 1 thread / 1 process x 1 thread: samples/s for {steps} steps",
        details={
            "accuracy_single_pct": single.accuracy,
            f"accuracy_hogwild_{cores}_pct": many.accuracy,
            "samples_per_s_single": single.samples_per_s,
            f"samples_per_s_hogwild_{cores}": many.samples_per_s,
            f"startup_s_hogwild_{cores}": many.startup,
            f"ratio_vs_single_{cores}_threads": many.samples_per_s / threaded.samples_per_s,
            "start_method": default_start_method(),
        },
        conditions={"accuracy within 2 points of single process": gap <= 2.0},
    )


def pool_chunksize(tasks: int = 20_000, workers: int | None = None, repeats: int = 3) -> Figure:
    """`Pool.map` of many tiny tasks on usable-cores workers: seconds with chunksize=1 / with the default."""
    from helpers import pool
    from helpers.timing import measure_load

    workers = usable_cores() if workers is None else workers
    one_chunk_each = -(-tasks // workers)
    with measure_load() as load:  # each time is the median of `repeats` runs on one pool
        seconds, startup = pool.map_seconds(tasks, workers, [1, None, one_chunk_each], repeats=repeats)
    default = pool.default_chunksize(tasks, workers)
    return Figure(
        ratio=seconds[1] / seconds[None],
        limit=None,
        floor=10.0,
        what=f"Pool.map of {tasks:,} tiny tasks on {workers} workers: chunksize=1 / default (chunksize={default})",
        details={
            "default_chunksize": default,
            "chunksize_1_s": seconds[1],
            "default_s": seconds[None],
            f"chunksize_{one_chunk_each}_s": seconds[one_chunk_each],
            "per_task_overhead_us": (seconds[1] - seconds[None]) / tasks * 1e6,
            "pool_startup_s": startup,
            "repeats": repeats,
            "start_method": default_start_method(),
            **{f"load_{key}": value for key, value in load.result.as_dict().items()},
        },
    )


def pool_io_scaling(tasks: int = 160, delay: float = 0.02, workers: int = 8) -> Figure:
    """Data collection (`delay` s of waiting per task) feeding Hogwild steps on a shared model, chunksize=1:
    tasks/s with `workers` pool workers / with 1. The same with CPU-bound collection is reported beside."""
    from helpers import pool
    from helpers.timing import measure_load

    with measure_load() as load:
        io = pool.scaling([1, workers], tasks=tasks, kind="io", delay=delay)
        cpu = pool.scaling([1, workers], tasks=max(workers, tasks // 4), kind="cpu", delay=delay)
    return Figure(
        ratio=io[workers].tasks_per_s / io[1].tasks_per_s,
        limit=float(workers),
        floor=6.0,
        what=f"I/O-bound collection ({delay * 1000:g} ms wait) + Hogwild step, {tasks} tasks: {workers} workers / 1",
        details={
            "tasks_per_s_1": io[1].tasks_per_s,
            f"tasks_per_s_{workers}": io[workers].tasks_per_s,
            "pool_startup_s_1": io[1].startup,
            f"pool_startup_s_{workers}": io[workers].startup,
            f"cpu_bound_ratio_{workers}": cpu[workers].tasks_per_s / cpu[1].tasks_per_s,
            "cpu_bound_limit": float(min(workers, usable_cores())),
            "usable_cores": usable_cores(),
            "start_method": default_start_method(),
            **{f"load_{key}": value for key, value in load.result.as_dict().items()},
        },
    )


def ddp_speedup(batch: int = 1024, width: int = 512, depth: int = 3, steps: int = 20) -> Figure:
    """DDP weak scaling, one rank per usable core at 1 thread each: samples/s / one process at 1 thread
    (`batch` samples per rank per step, an MLP of `depth` hidden layers `width` wide)."""
    from helpers import distributed

    cores = usable_cores()
    shape = {"batch": batch, "width": width, "depth": depth, "steps": steps}
    single = distributed.ddp_throughput(1, threads=1, **shape)
    many = distributed.ddp_throughput(cores, threads=1, **shape)
    threaded = distributed.ddp_throughput(1, threads=cores, **shape)
    return Figure(
        ratio=many.samples_per_s / single.samples_per_s,
        limit=float(cores),
        floor=0.7 * cores,
        what=f"DDP weak scaling, {cores} ranks x 1 thread / 1 process x 1 thread: samples/s, {batch} samples per rank",
        details={
            "samples_per_s_single": single.samples_per_s,
            f"samples_per_s_ddp_{cores}": many.samples_per_s,
            f"samples_per_s_single_{cores}_threads": threaded.samples_per_s,
            f"ratio_vs_single_{cores}_threads": many.samples_per_s / threaded.samples_per_s,
            f"startup_s_ddp_{cores}": many.startup,
            "start_method": default_start_method(),
        },
    )


def ring_allreduce(nbytes: int = 4 << 20, repeats: int = 10) -> Figure:
    """The hand-written ring all-reduce of notebook 05 on 2 ranks: seconds / `dist.all_reduce`'s, for a
    4 MB tensor. No floor: it shows how close a clear implementation gets to gloo's."""
    from helpers import distributed

    times = distributed.ring_vs_allreduce(nbytes, repeats=repeats, world_size=2)
    return Figure(
        ratio=times["ring"] / times["all_reduce"],
        limit=None,
        what=f"ring all-reduce by hand / dist.all_reduce, {nbytes / 2**20:g} MB float32 on 2 ranks (gloo, loopback)",
        details={
            "ring_ms": times["ring"] * 1000,
            "all_reduce_ms": times["all_reduce"] * 1000,
            "start_method": default_start_method(),
        },
    )


FIGURES: dict[str, Callable[[], Figure]] = {
    "threads_vs_processes": threads_vs_processes,
    "spawn_vs_fork_start": spawn_vs_fork_start,
    "dataloader_io": dataloader_io,
    "dataloader_cpu": dataloader_cpu,
    "queue_shared_vs_pickle": queue_shared_vs_pickle,
    "hogwild_speedup": hogwild_speedup,
    "pool_chunksize": pool_chunksize,
    "pool_io_scaling": pool_io_scaling,
    "ddp_speedup": ddp_speedup,
    "ring_allreduce": ring_allreduce,
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
        shown = {**fig.details, **fig.conditions}
        details = ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in shown.items())
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
            summary = " ".join((fn.__doc__ or "no description").split())
            print(f"{name}: {summary.split('. ')[0].rstrip('.')}")
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
