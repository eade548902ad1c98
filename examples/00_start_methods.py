"""Start worker processes the portable way: a main guard, an explicit start method, and threads sized so
that processes x threads never exceeds the cores.

Run it as `python examples/00_start_methods.py`. It works under spawn (macOS, Windows, and the choice made
here), forkserver and fork alike, because the workers import this file and find everything by name.
"""

import multiprocessing as mp
import os

import torch

PROCESSES = 2


def usable_cores() -> int:
    """The cores this process may run on (a container or taskset can allow fewer than the machine has)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def init_worker(threads: int) -> None:
    """Runs once in each worker before any task: cap torch's threads so the workers do not oversubscribe."""
    torch.set_num_threads(threads)


def work(seed: int) -> tuple[int, int, float]:
    """One task: a worker function defined at module level, so a spawned worker can import it."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(256, 256, generator=generator)
    return seed, torch.get_num_threads(), round(float((a @ a).abs().mean()), 4)


def main() -> None:
    threads = max(1, usable_cores() // PROCESSES)
    ctx = mp.get_context("spawn")  # a context, not the global set_start_method
    with ctx.Pool(PROCESSES, initializer=init_worker, initargs=(threads,)) as pool:
        results = pool.map(work, range(4))
    for seed, worker_threads, value in results:
        print(f"task {seed}: {worker_threads} torch thread(s), mean |a @ a| = {value}")


if __name__ == "__main__":  # spawned workers import this file; only the parent runs main()
    main()
