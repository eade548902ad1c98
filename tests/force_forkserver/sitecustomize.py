"""Make forkserver the *platform default* start method in every Python process with this folder on PYTHONPATH.

Python 3.14 made forkserver the default on Linux. `make test` runs the notebooks a third time with this, so
that they are checked as they will run there: every worker must be importable, and nothing may remove the
folder in which multiprocessing keeps the forkserver's socket (the kernel's `pymp-*` folder).

This swaps the default context's fallback the way CPython 3.14 does, instead of calling
`set_start_method("forkserver", force=True)`: the latter *fixes* the context, so a script run from a
notebook that calls `set_start_method` itself would fail with "context has already been set".
"""

import multiprocessing.context as _context

_context._default_context._default_context = _context._concrete_contexts["forkserver"]
