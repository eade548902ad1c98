"""Install the pinned torch into a virtual environment, as the CPU build where PyPI would give a CUDA one.

`python tools/install_torch.py` (run by `make setup` with the venv's Python, before requirements.txt).

On Linux x86_64, PyPI's torch wheel is a CUDA build that pulls several GB of `nvidia-*` packages; this
course needs only the CPU build, which PyTorch serves from its own package index. So there, unless the
user asks for PyPI's build with `TORCH_BUILD=default`, torch alone is installed from that index first;
the rest of requirements.txt then finds it already satisfied (`torch==2.13.0` admits `2.13.0+cpu`).
The index is probed first with a short time-out: pip itself would retry an unreachable index for about
8 s per package, and its exit code does not tell "installed from the index" from "found elsewhere" (a
local wheel folder in pip's configuration). When the index cannot be reached, a one-line notice says so
and nothing is installed here: requirements.txt then installs torch the ordinary way. Either way,
`--report` (run by `make setup` at its end) names the torch build that was installed.

Standard library only: it runs before anything else is installed.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT = 5.0  # seconds


def torch_pin(requirements: Path = ROOT / "requirements.txt") -> str:
    """The `torch==X.Y.Z` line of requirements.txt (one source of truth for the version)."""
    for line in requirements.read_text().splitlines():
        if re.match(r"^torch==[\w.]+\s*(#.*)?$", line.strip()):
            return line.split("#")[0].strip()
    raise ValueError(f"{requirements} has no exact 'torch==X.Y.Z' pin")


def wants_cpu_index(build: str, system: str, machine: str) -> bool:
    """Only Linux x86_64 gets a CUDA build from PyPI; macOS and Linux aarch64 wheels are CPU builds."""
    if build not in ("cpu", "default"):
        raise ValueError(f"TORCH_BUILD must be 'cpu' or 'default', got {build!r}")
    return build == "cpu" and system == "Linux" and machine in ("x86_64", "AMD64")


def index_reachable(index: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """True when the index answers its torch page within `timeout` seconds."""
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=timeout) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def installed_torch(python: str) -> str | None:
    """The torch version installed for `python`, or None."""
    code = "import importlib.metadata as m\ntry: print(m.version('torch'))\nexcept m.PackageNotFoundError: pass"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() or None


def main(python: str = sys.executable, environ: dict[str, str] | None = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    build = environ.get("TORCH_BUILD", "cpu")
    index = environ.get("TORCH_CPU_INDEX", CPU_INDEX)
    pin = torch_pin()
    try:
        cpu = wants_cpu_index(build, platform.system(), platform.machine())
    except ValueError as exc:
        print(f"install_torch: {exc}", file=sys.stderr)
        return 2
    if not cpu:
        return 0  # requirements.txt installs torch from the ordinary index
    version = installed_torch(python)
    if version is not None and version.split("+")[0] == pin.split("==")[1]:
        return 0
    if not index_reachable(index):
        print(
            f"notice: PyTorch's CPU package index ({index}) cannot be reached; torch comes with requirements.txt "
            "from pip's configured index instead (the build installed is named once the install is done)",
            file=sys.stderr,
        )
        return 0
    print(f"installing {pin} (CPU build) from {index}; TORCH_BUILD=default gives PyPI's build", file=sys.stderr)
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-deps", "--index-url", index, pin]
    return subprocess.run(cmd, check=False).returncode


def build_installed(python: str) -> str:
    """One line naming the torch that `python` imports: its version and whether it is a CPU or CUDA build."""
    code = "import torch; print(torch.__version__, torch.version.cuda or '')"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return "torch is not installed (or does not import); run `make setup` again and read pip's errors"
    version, _, cuda = done.stdout.strip().partition(" ")
    kind = f"a CUDA {cuda} build" if cuda else "the CPU build"
    return f"installed torch {version}: {kind}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--report"]:  # after requirements.txt: say what was installed, not what might be
        print(build_installed(sys.executable))
        sys.exit(0)
    sys.exit(main())
