"""torch's intra-op thread count, set for one block and given back after it.

Several chapters time something in the notebook's own process at a count of their own: one thread, so that
this process and its workers do not oversubscribe the cores; every core, for the baseline a user would pick.
The kernel must get its count back whatever happens in the block, or the next cell's timing runs at the
wrong count and says nothing about it. torch is imported only when the block runs: chapters that start
spawn children keep `import helpers.threads` cheap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from helpers.validate import positive_int

__all__ = ["torch_threads"]


@contextlib.contextmanager
def torch_threads(n: int | None = None) -> Iterator[None]:
    """Run the block with torch at `n` threads and give the caller's count back after it, also after an
    error. With `n=None` the block sets the count itself (a worker function run in this process) and only
    the restoring is done here."""
    import torch

    if n is not None:
        positive_int("n", n)
    before = torch.get_num_threads()
    try:
        if n is not None:
            torch.set_num_threads(n)
        yield
    finally:
        torch.set_num_threads(before)
