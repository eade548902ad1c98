"""A Pool worker that ends with os._exit in the middle of a task.

Source: https://github.com/python/cpython/pull/10441
Cause: a worker of multiprocessing.Pool dies unexpectedly (os._exit, a signal, the OOM killer) while it runs a task;
    the pool replaces it, the task is lost, and map_async(...).get() waits forever (bpo-22393).
Changed: the test's bad_exit target, run with map instead of inside the test suite.
Expect: pool worker died && ProcessPoolExecutor
Timeout: 2
"""

import multiprocessing
import os


def bad_exit(value):
    if value:
        os._exit(123)
    return value


if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(2) as pool:
        print(pool.map(bad_exit, [0, 1, 0, 0]))
