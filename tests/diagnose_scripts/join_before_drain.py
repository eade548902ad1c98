"""Join before drain (06, section 4): the producer cannot exit until its 8 MB item has left the pipe."""

import multiprocessing as mp
import sys


def produce(queue) -> None:
    queue.put(b"x" * 8_000_000)


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1] if len(sys.argv) > 1 else "fork")  # forkserver: Linux on 3.14
    queue = ctx.Queue()
    producer = ctx.Process(target=produce, args=(queue,))
    producer.start()
    producer.join()  # waits for an exit that waits for us to read
    print(len(queue.get()))
