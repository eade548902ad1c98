"""Mark, in a torchrun rank's standard error, the moment its script has returned.

`tests/example_runner.py` puts this folder on PYTHONPATH for the scripts it runs under torchrun. torch 2.13
can abort a rank *after* its script has returned (see `example_runner`); the runner must tell that abort,
which it skips, from one during the work, which fails the test. Python runs atexit handlers after the main
module has finished and before it starts tearing the interpreter down (where the abort happens), and this
one was registered first, so it runs last of them. Only ranks print it (torchrun sets LOCAL_RANK for them),
not torchrun's own agent process.
"""

import atexit
import os
import sys

if "LOCAL_RANK" in os.environ:
    atexit.register(lambda: print("example_runner: the script returned", file=sys.stderr, flush=True))
