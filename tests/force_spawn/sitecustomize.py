"""Make spawn the *platform default* start method in every Python process with this folder on PYTHONPATH.

`make test` runs the notebooks a second time with it, so that they are checked as they run on macOS and
Windows: every worker must be importable and every cell must print the same as under fork.

This swaps the default the way macOS has it, instead of calling `set_start_method("spawn", force=True)`:
the latter *fixes* the context, so a script run from a notebook that calls `set_start_method` itself
would fail with "context has already been set", which it would not do on a Mac.
"""

import multiprocessing.context as _context

_context._default_context._default_context = _context._concrete_contexts["spawn"]
