"""A model's output (part of the autograd graph) put on a multiprocessing queue: the consumer waits forever.

Source: https://github.com/rhasspy/piper/issues/472
Cause: "RuntimeError: Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not
    support crossing process boundaries. If you just want to transfer the data, call detach()": here the queue's
    feeder thread fails to pickle it, prints that, and the item never arrives.
Changed: a Linear layer instead of the VITS model; a queue to a consumer process instead of Lightning's workers.
Expect: Cowardly refusing && detach
Timeout: torch 3
"""

import torch
import torch.multiprocessing as mp
from torch import nn


def consume(queue) -> None:
    print("got", queue.get().shape)


if __name__ == "__main__":
    queue = mp.Queue()
    consumer = mp.Process(target=consume, args=(queue,))
    consumer.start()
    out = nn.Linear(4, 4)(torch.randn(2, 4))
    queue.put(out)
    consumer.join()
