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

import json
import sys
from pathlib import Path

from ipykernel.ipkernel import IPythonKernel

KERNEL_CLASS = "helpers.kernel.CourseKernel"


class CourseKernel(IPythonKernel):
    """IPythonKernel whose language_info does not depend on the interpreter's minor or micro version."""

    language_info = {**IPythonKernel.language_info, "version": str(sys.version_info[0])}


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
