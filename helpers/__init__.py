"""Worker functions, experiments, plots and checkers for the PyTorch multiprocessing course.

Kept deliberately light: no torch, numpy or matplotlib import here. A spawned child imports the module its
target lives in (and this file), and every needless import costs each child time on a small laptop.
Import what you need from the submodules, e.g. `from helpers import watchdog`.
"""
