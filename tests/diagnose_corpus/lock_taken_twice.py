"""A worker that takes the same (non re-entrant) lock twice.

Source: https://runebook.dev/en/articles/python/library/multiprocessing/multiprocessing.RLock
Cause: a function that holds a Lock calls another that acquires the same Lock; a Lock is not re-entrant, so the
    thread waits for itself forever. No fork is involved while the lock is held (an RLock is the fix).
Changed: the two methods of the page's scenario, run in a multiprocessing worker.
Expect: a lock taken twice && !a lock held at fork
Timeout: 2
"""

import multiprocessing as mp
import threading


class Cache:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items = {}

    def size(self) -> int:
        with self.lock:
            return len(self.items)

    def add(self, key, value) -> int:
        with self.lock:
            self.items[key] = value
            return self.size()  # takes self.lock again


def work() -> None:
    Cache().add("a", 1)


if __name__ == "__main__":
    worker = mp.get_context("fork").Process(target=work)
    worker.start()
    worker.join()
