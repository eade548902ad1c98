"""A worker process that cannot hang its parent: the safe patterns of notebook 06 in one script.

- the main guard: a spawn child imports this file, so only definitions run at import;
- a spawn context, because the parent has threads (torch's thread pool) that a fork would copy half-way;
- one torch thread in the worker, so that processes x threads does not exceed the cores;
- a sentinel at the end of the worker's output, even when it fails;
- get with a timeout before join, asking whether the worker still lives after each timeout (and, if not,
  getting once more: what it put just before it ended is in the queue);
- join with a timeout, and terminate what is still running.

Run it with `python examples/06_safe_patterns.py`.
"""

import multiprocessing as mp
import queue as queue_module

import torch

DONE = "done"


def make_features(results, n):
    """The worker: one result per item, then the sentinel (with the error, if it failed)."""
    torch.set_num_threads(1)
    try:
        for i in range(n):
            results.put((i, torch.full((1000,), float(i)).sum().item()))
        results.put((DONE, None))
    except Exception as exc:
        results.put((DONE, repr(exc)))
        raise


def collect(results, worker, timeout=5.0):
    """Get items until the sentinel; after each timeout, give up only if the worker is gone and nothing it
    sent is left (a worker that ended on its own has written all it put, maybe just after the timeout)."""
    items = {}
    while True:
        try:
            key, value = results.get(timeout=timeout)
        except queue_module.Empty:
            if worker.is_alive():
                continue
            try:
                key, value = results.get_nowait()
            except queue_module.Empty:
                raise RuntimeError(f"worker exited with code {worker.exitcode} before it finished") from None
        if key == DONE:
            if value is not None:
                raise RuntimeError(f"worker failed: {value}")
            return items
        items[key] = value


def main():
    torch.ones(4_000_000).sum()  # like most programs, the parent has run a parallel op: its threads exist
    ctx = mp.get_context("spawn")  # a fresh process: no thread, lock or thread pool copied from this one
    results = ctx.Queue()
    worker = ctx.Process(target=make_features, args=(results, 8))
    worker.start()
    try:
        items = collect(results, worker)  # get first...
    finally:
        worker.join(timeout=30)  # ...then join, with a timeout
        if worker.is_alive():
            worker.terminate()
            worker.join(timeout=5)
    print("features:", [items[i] for i in sorted(items)])
    print("worker exit code:", worker.exitcode)


if __name__ == "__main__":
    main()
