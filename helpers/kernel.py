"""The course's kernel: ipykernel, reporting Python's language version as "3" instead of x.y.z.

Why: JupyterLab 4 writes the kernel's `language_info` into a notebook as soon as its kernel starts and
marks the notebook unsaved unless that is deep-equal to the stored one. ipykernel reports the exact
interpreter version (`sys.version`), so a notebook stored under Python 3.11.7 shows the unsaved-changes
dot to every learner on another Python, and closing it untouched asks to save. With this kernel the
stored and the reported `language_info` agree on every Python 3.

`python -m helpers.kernel` makes it the kernel of this environment: it writes
`<sys.prefix>/etc/ipython/ipython_kernel_config.json`, which every ipykernel started from this
interpreter reads (JupyterLab's python3 kernel, nbval with --nbval-current-env, helpers.regenerate).
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from ipykernel.ipkernel import IPythonKernel

KERNEL_CLASS = "helpers.kernel.CourseKernel"


class CourseKernel(IPythonKernel):
    """IPythonKernel whose language_info does not depend on the interpreter's minor or micro version,
    whose shutdown does not wait on multiprocessing's helper processes, and whose garbage collections
    stop walking torch's modules once it is loaded (`freeze_imports`)."""

    language_info = {**IPythonKernel.language_info, "version": str(sys.version_info[0])}

    async def do_execute(self, *args: Any, **kwargs: Any) -> Any:
        reply = await super().do_execute(*args, **kwargs)
        freeze_imports()
        return reply

    async def _at_shutdown(self) -> None:
        stop_multiprocessing_helpers()
        await super()._at_shutdown()


def freeze_imports() -> bool:
    """After the first cell that left torch loaded, collect once and move every object left (torch's
    modules above all, about 170,000 objects) out of the garbage collector's sight (`gc.freeze`); True
    when it did that now.

    Why: the helpers collect garbage after each run that may leave multiprocessing's semaphores in
    reference cycles (under spawn a semaphore is a file in /dev/shm until its object goes), and with torch
    loaded each full collection walked all of torch's objects again: about 0.08 s a call here, 26 s of CPU
    over one pass of the notebooks. Frozen, a collection takes microseconds. The cost: an object alive at
    that moment that later becomes garbage inside a reference cycle is freed only when the kernel stops
    (objects freed by their reference count, most of them, go at once as before); everything made later
    is collected as usual."""
    import gc

    if "torch" not in sys.modules or gc.get_freeze_count():
        return False
    gc.collect()
    gc.freeze()
    return True


def stop_multiprocessing_helpers() -> None:
    """Stop the resource tracker (and a forkserver) the way multiprocessing itself does at exit.

    Why: once a kernel has used spawn or forkserver, multiprocessing's resource tracker runs as the
    kernel's child, and it ignores SIGTERM by design (it must outlive a killed parent to clean up after
    it). At shutdown ipykernel sends its children SIGTERM with waits of 0.01 to 10 s between rounds, and
    only then SIGKILL, so a kernel that ran one spawn Pool took seconds to half a minute to shut down
    (a SIGKILLed tracker also never unlinks what a crashed child leaked). Closing the tracker's pipe is
    its normal stop: it cleans up and exits at once.

    First the kernel's own multiprocessing objects are released as its exit would release them
    (collect cyclic garbage, then run multiprocessing's exit finalizers: a Pool is terminated, a
    semaphore unlinked). Stopping the tracker while a learner's `q = Queue()` still lived made it
    warn "There appear to be 3 leaked semaphore objects" at every shutdown under spawn or forkserver,
    which the course teaches to read as a crash."""
    import gc
    from multiprocessing import forkserver, resource_tracker, util

    with contextlib.suppress(Exception):
        gc.collect()
        util._run_finalizers(0)  # noqa: SLF001 - what multiprocessing's atexit hook runs first
    for helper in (getattr(forkserver, "_forkserver", None), getattr(resource_tracker, "_resource_tracker", None)):
        stop = getattr(helper, "_stop", None)  # Python 3.11.5+ / 3.12; older ones keep ipykernel's way
        if stop is not None:
            with contextlib.suppress(Exception):  # shutting down: never let this block the rest
                stop()


def config_path(prefix: str | Path = sys.prefix) -> Path:
    """Where ipykernel started from the environment at `prefix` reads its configuration (IPython's
    ENV_CONFIG_DIRS)."""
    return Path(prefix) / "etc" / "ipython" / "ipython_kernel_config.json"


def install(prefix: str | Path = sys.prefix) -> Path:
    """Make CourseKernel the kernel class of the environment at `prefix`, keeping other settings there."""
    if not isinstance(prefix, (str, Path)):
        raise TypeError(f"prefix must be a path, got {type(prefix).__name__}")
    path = config_path(prefix)
    config = json.loads(path.read_text()) if path.is_file() else {}
    if not isinstance(config, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    config.setdefault("IPKernelApp", {})["kernel_class"] = KERNEL_CLASS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=1) + "\n")
    return path


if __name__ == "__main__":
    print(f"kernel class {KERNEL_CLASS} set in {install()}")
