"""Share tensors between processes through a queue, the way chapter 02 teaches.

Run it as `python examples/02_shared_tensors.py`. A producer process sends tensors through a
torch.multiprocessing queue (each tensor's storage moves to shared memory and only a handle travels) and
stays alive until the consumer says it has them all: under the `file_descriptor` strategy, Linux's
default, the consumer fetches each tensor's memory from the producer while unpickling. The consumer keeps
copies (`clone()`), so it holds no file descriptor per kept tensor. A shared counter is updated under its
lock. Every wait has a timeout, and the queue is drained before the producer is joined.
"""

import queue

import torch
import torch.multiprocessing as mp

TIMEOUT = 60  # seconds: no wait in this script can last forever


def produce(tensors, done, sent, count: int) -> None:
    """Send `count` tensors on the queue `tensors`, count them in the shared Value `sent`, then stay alive
    until the consumer sets the Event `done`."""
    torch.set_num_threads(1)
    for i in range(count):
        tensors.put(torch.full((1000,), float(i)))
        with sent.get_lock():  # read-add-write under the Value's lock: no update lost
            sent.value += 1
    done.wait(TIMEOUT)  # keep the shared memory fetchable until the consumer has everything


def main() -> None:
    ctx = mp.get_context("spawn")  # portable; the producer is a module-level function it can import
    tensors, done, sent = ctx.Queue(), ctx.Event(), ctx.Value("i", 0)
    count = 100
    producer = ctx.Process(target=produce, args=(tensors, done, sent, count))
    producer.start()
    try:
        kept = [tensors.get(timeout=TIMEOUT).clone() for _ in range(count)]  # drain first, keep copies
    except queue.Empty:
        producer.kill()
        raise
    finally:
        done.set()
        producer.join(timeout=TIMEOUT)  # then join, with a timeout
    print("received:", len(kept), "tensors; producer counted", sent.value, "; exit code", producer.exitcode)
    print("values intact:", all(bool((t == float(i)).all()) for i, t in enumerate(kept)))
    print("kept copies are private (not shared):", not any(t.is_shared() for t in kept))


if __name__ == "__main__":
    main()
