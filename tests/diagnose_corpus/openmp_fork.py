"""A forked child's first parallel torch op after the parent used OpenMP.

Source: https://github.com/numpy/numpy/issues/18167
Cause: GNU OpenMP's thread pool is not fork-safe (gcc bug 60035, cited in the thread): the parent started its
    threads, the forked child waits in libgomp for threads that fork did not copy.
Changed: torch's own OpenMP (libgomp) instead of an OpenMP build of OpenBLAS; two threads; one forked child.
Expect: fork after OpenMP && libgomp
Timeout: torch 3.5
"""

import multiprocessing as mp

import torch


def child() -> None:
    torch.ones(4_000_000).sum()


if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.ones(4_000_000).sum()
    proc = mp.get_context("fork").Process(target=child)
    proc.start()
    proc.join()
