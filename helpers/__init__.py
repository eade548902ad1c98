"""Worker functions, experiments, plots and checkers for the PyTorch multiprocessing course.

Kept deliberately light: no torch, numpy or matplotlib import here. A spawned child imports the module its
target lives in (and this file), and every needless import costs each child time on a small laptop.
Import what you need from the submodules, e.g. `from helpers import watchdog`.
"""

import os as _os

# torch creates its compiler cache, `torchinductor_<user>`, in the temporary folder as soon as anything
# imports torch._dynamo, which building any optimizer does (torch/_inductor/runtime/cache_dir_utils.py).
# The course compiles nothing, and its runs leave nothing in the temporary folder: unless the user chose a
# place, that cache goes to the user's cache folder instead.
_os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR",
    _os.path.join(_os.environ.get("XDG_CACHE_HOME") or _os.path.expanduser("~/.cache"), "torchinductor"),
)
