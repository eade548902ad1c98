"""A producer joined before its queue is drained.

Source: https://sopython.com/canon/82/programs-using-multiprocessing-hang-deadlock-and-never-complete/
Cause: the child put more data on a multiprocessing.Queue than the pipe holds; it cannot exit until someone reads,
    and the parent joins it before reading: each waits for the other.
Changed: one producer and a 4 MB item instead of many workers' results.
Expect: join before drain
Timeout: 2
"""

import multiprocessing as mp


def work(queue) -> None:
    queue.put([0.5] * 500_000)


if __name__ == "__main__":
    queue = mp.get_context("fork").Queue()
    worker = mp.get_context("fork").Process(target=work, args=(queue,))
    worker.start()
    worker.join()
    print(len(queue.get()))
