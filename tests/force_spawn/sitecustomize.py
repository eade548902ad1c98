"""Make spawn the default start method in every Python process that has this folder on PYTHONPATH.

`make test` runs the notebooks a second time with it, so that they are checked as they run on macOS and
Windows (and, for forkserver-like behaviour, on Linux with Python >= 3.14): every worker must be
importable and every cell must print the same as under fork.
"""

import multiprocessing

multiprocessing.set_start_method("spawn", force=True)
