"""Fork after OpenMP (06, section 1): the parent runs a parallel op, then a forked child runs one too."""

import multiprocessing as mp

import torch


def child() -> None:
    torch.ones(4_000_000).sum()  # waits forever for OpenMP threads that fork did not copy


if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.ones(4_000_000).sum()  # the parent's OpenMP thread pool now exists
    proc = mp.get_context("fork").Process(target=child)
    proc.start()
    proc.join()
