"""A Pool task that calls exit(1): map never returns.

Source: https://github.com/DaehwanKimLab/hisat-genotype/issues/56
Cause: exit() in a task raises SystemExit, which ends the pool worker in the middle of its task; the Pool starts a
    replacement but the task's result never comes, so map waits forever (bpo-22393).
Changed: nothing but the task's name (the thread's own four lines).
Expect: pool worker died && ProcessPoolExecutor
Timeout: 2
"""

import multiprocessing


def s(i):
    exit(1)


with multiprocessing.Pool(1) as p:
    p.map(s, [0])
