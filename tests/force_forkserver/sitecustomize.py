"""Make forkserver the *platform default* start method in every Python process with this folder on PYTHONPATH.

`make test` runs the notebooks a third time with it, as they run on Linux from Python 3.14, where CPython
made forkserver the default. Like `tests/force_spawn`, this swaps the default context's fallback, the way
CPython 3.14 does it, instead of calling `set_start_method("forkserver", force=True)`, which would *fix*
the context (a script that calls `set_start_method` itself would then fail where it does not on 3.14).
"""

import multiprocessing.context as _context

_context._default_context._default_context = _context._concrete_contexts["forkserver"]
