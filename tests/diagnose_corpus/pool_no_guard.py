"""A Pool at the top level of a script run under spawn (no main guard).

Source: https://agentbeck.bot/report/31409
Cause: under spawn (macOS, Windows) each child imports the main script, whose top level starts the Pool again; the
    children die with "An attempt has been made to start a new process before the current process has finished its
    bootstrapping phase" and the Pool keeps replacing them.
Changed: the spawn start method chosen explicitly (Linux defaults to fork here).
Expect: missing main guard && Pool
Timeout: 3
"""

import multiprocessing as mp


def square(x):
    return x * x


pool = mp.get_context("spawn").Pool(2)
print(pool.map(square, range(8)))
