"""A missing main guard (06, section 3): every spawn worker runs this top level again and dies."""

import multiprocessing as mp


def square(x):
    return x * x


pool = mp.get_context("spawn").Pool(2)  # no `if __name__ == "__main__":`
print("results:", pool.map(square, range(4)))
pool.close()
