"""A script that finishes: what it writes and its exit code (argv[1]) must come through unchanged."""

import multiprocessing as mp
import sys


def square(x):
    return x * x


if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        print("results:", pool.map(square, range(4)))
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[1]))
