"""numpy's OpenBLAS used in the parent, then in a forked child.

Source: https://github.com/OpenMathLib/OpenBLAS/issues/5520
Cause: OpenBLAS 0.3.30's thread server could deadlock in a forked child's dgetrf_ (numpy/numpy#30092,
    scipy/scipy#23686) after its threads were started in the parent.
Changed: numpy.linalg.solve (dgesv, which calls dgetrf) in the parent and in a Pool of forked workers.
Expect: nothing
Reproduces: no: the numpy here ships OpenBLAS 0.3.31, which has the fix; the script finishes (checked: nothing said)
Timeout: 30
"""

import multiprocessing as mp

import numpy as np


def solve(seed: int) -> float:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((300, 300))
    return float(np.linalg.solve(a, np.ones(300)).sum())


if __name__ == "__main__":
    solve(0)
    with mp.get_context("fork").Pool(2) as pool:
        print(len(pool.map(solve, range(4))))
