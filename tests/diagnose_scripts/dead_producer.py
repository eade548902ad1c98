"""A dead producer (06, section 4): the consumer's get() has no timeout, the producer raised."""

import multiprocessing as mp


def produce(queue) -> None:
    queue.put(0)
    raise ValueError("bad record 1")


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    ctx.Process(target=produce, args=(queue,)).start()
    got = [queue.get() for _ in range(3)]  # the second get waits forever
