"""A lock held by another thread at fork (06, section 1): the child gets it locked, with no thread to
release it."""

import multiprocessing as mp
import threading
import time

lock = threading.Lock()


def hold() -> None:
    with lock:
        time.sleep(1_800)


def child() -> None:
    with lock:  # locked in the copy fork made, and the holder was not copied
        pass


if __name__ == "__main__":
    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    time.sleep(0.1)
    proc = mp.get_context("fork").Process(target=child)
    proc.start()
    proc.join()
