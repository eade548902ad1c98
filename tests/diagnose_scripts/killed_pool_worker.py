"""A pool worker killed by SIGKILL in the middle of its task (what the out-of-memory killer does): the
Pool replaces the worker, the task's result never arrives, and `map` waits forever."""

import multiprocessing as mp
import os
import signal
import time


def task(i: int) -> int:
    time.sleep(0.3)  # long enough for the diagnosis to see the worker before it goes
    if i == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return i * i


if __name__ == "__main__":
    with mp.Pool(2) as pool:
        print(pool.map(task, range(4)))
