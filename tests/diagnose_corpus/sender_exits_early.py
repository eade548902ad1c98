"""A producer puts tensors on a queue and exits at once: the consumer cannot fetch them.

Source: https://github.com/pytorch/pytorch/issues/11422
Cause: the maintainers' corrected repro "added mp.event so that `a` and `idx` don't go out of scope (destroyed) before
    consumer get to them": a shared tensor is fetched from the process that sent it, which must still be alive; here
    it has exited, and the receiver fails (ConnectionRefusedError or FileNotFoundError, varying from run to run).
Changed: CPU tensors (file descriptors shared through multiprocessing's resource sharer) instead of CUDA ones; no
    event, on purpose; the consumer is the main process.
Expect: sender && alive
Timeout: torch 3
"""

import torch
import torch.multiprocessing as mp


def producer(queue) -> None:
    for _ in range(3):
        queue.put(torch.ones(2, 2))


if __name__ == "__main__":
    queue = mp.Queue()
    p = mp.Process(target=producer, args=(queue,))
    p.start()
    p.join()  # the producer is gone before anything is taken
    print(sum(queue.get().sum().item() for _ in range(3)))
