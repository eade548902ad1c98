"""A consumer waiting for a producer that raised.

Source: https://runebook.dev/en/docs/python/library/multiprocessing/multiprocessing.Queue.join_thread
Cause: the producer process died of an exception before putting its results; the consumer's get() has no
    timeout, so it waits forever for an item nobody will send (the producer's traceback is on stderr).
Changed: a producer that fails on its second record.
Expect: dead (or missing) producer
Timeout: 2
"""

import multiprocessing as mp


def produce(queue) -> None:
    for record in ["1", "two", "3"]:
        queue.put(int(record))


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    ctx.Process(target=produce, args=(queue,)).start()
    print(sum(queue.get() for _ in range(3)))
