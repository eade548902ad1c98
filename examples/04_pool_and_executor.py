"""Process pools in a project of your own: `Pool.imap` with a progress bar, and a `ProcessPoolExecutor` that
starts again when a worker is killed (the out-of-memory killer's SIGKILL breaks the whole executor).

Run it as a script: `python examples/04_pool_and_executor.py`. The tasks must be idempotent (safe to run
twice): after a broken pool, the tasks without a result are submitted again.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import torch
from tqdm import tqdm


def init_worker() -> None:
    """Runs once in every worker: one torch thread each, so that workers x threads stays within the cores."""
    torch.set_num_threads(1)


def square(x: int) -> int:
    """The task. Defined at module level: spawn and forkserver workers import it by module and name."""
    return x * x


def with_pool(fn: Callable[[Any], Any], items: Sequence[Any], workers: int) -> list[Any]:
    """`fn` over `items` in input order, the bar moving as each result arrives."""
    with mp.get_context().Pool(workers, initializer=init_worker) as pool, tqdm(total=len(items)) as bar:
        results = []
        for result in pool.imap(fn, items, chunksize=8):  # a few tasks per message: less overhead
            results.append(result)
            bar.update(1)
        pool.close()  # the with block calls terminate(): let the workers end cleanly first
        pool.join()
    return results


def with_retries(fn: Callable[[Any], Any], items: Sequence[Any], workers: int, retries: int = 2) -> list[Any]:
    """`fn` over `items` with an executor; when a worker dies (BrokenProcessPool), a new executor runs the
    tasks that have no result yet, at most `retries` more times."""
    results: dict[int, Any] = {}
    for _attempt in range(retries + 1):
        todo = [i for i in range(len(items)) if i not in results]
        if not todo:
            break
        try:
            with ProcessPoolExecutor(workers, mp_context=mp.get_context(), initializer=init_worker) as executor:
                futures = {executor.submit(fn, items[i]): i for i in todo}
                for future in as_completed(futures, timeout=120):  # every wait bounded
                    results[futures[future]] = future.result()
        except BrokenProcessPool:
            print(f"a worker died: {len(items) - len(results)} tasks go to a new executor")
    if len(results) < len(items):
        raise RuntimeError(f"{len(items) - len(results)} tasks failed after {retries} retries")
    return [results[i] for i in range(len(items))]


def main() -> None:
    items = list(range(100))
    print("Pool.imap, sum of squares:", sum(with_pool(square, items, workers=2)))
    print("ProcessPoolExecutor, sum of squares:", sum(with_retries(square, items, workers=2)))


if __name__ == "__main__":  # spawn and forkserver workers import this file: start nothing on import
    main()
