"""A lock held by another thread when the process forks.

Source: https://github.com/python/cpython/issues/50970
Cause: a thread of the parent held a lock at the moment of fork; the child gets the lock locked, and the thread that
    would release it does not exist in the child (bpo-6721, "Locks in the standard library should be sanitized on
    fork").
Changed: a module-level lock of the user's own (the standard library's locks are reinitialised after fork since
    3.7) held by a background refresher thread.
Expect: a lock held at fork
Timeout: 2
"""

import multiprocessing as mp
import threading
import time

config_lock = threading.Lock()


def refresher() -> None:
    while True:
        with config_lock:
            time.sleep(0.5)  # re-reading the configuration


def child() -> None:
    with config_lock:
        pass


if __name__ == "__main__":
    threading.Thread(target=refresher, daemon=True).start()
    time.sleep(0.1)
    proc = mp.get_context("fork").Process(target=child)
    proc.start()
    proc.join()
