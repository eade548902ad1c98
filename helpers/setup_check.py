"""Is this machine ready for the course? `make check` prints one PASS / WARN / FAIL line per check.

Every learner runs it a week before a workshop and sends the output to the instructor, so each WARN and
FAIL carries its fix in one sentence, a check that breaks reports itself as a FAIL instead of a
traceback, and the whole run stays under 30 s on a 2-core laptop.

Only the standard library is imported at the top: on a fresh clone without `.venv`, `make check` runs
this file as a plain script with the system Python (`python3 helpers/setup_check.py`), runs the checks
that need nothing else, and FAILs with "run make setup first". The checks that need torch, py-spy or
Jupyter run only inside an environment that has them. The spawn child of the start-method check
re-imports this module by name, hence the main guard at the bottom.
"""

from __future__ import annotations

import sys

# The system Python that runs this file on a fresh clone may predate the package's minimum: an old one gets
# a FAIL line before importing what it lacks (3.7 has no importlib.metadata), not a traceback.
if sys.version_info < (3, 8):  # noqa: UP036 - run by system Pythons older than the package's minimum
    print(f"FAIL  Python           {sys.version.split()[0]} is too old\n{'':23}fix: install Python 3.10 or newer")
    sys.exit(1)

import contextlib
import importlib.metadata
import math
import multiprocessing as mp
import os
import re
import shutil
import signal
import socket
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script path: make the `helpers` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from helpers.environment import cpu_quota, default_start_method, usable_cores

REPO = Path(__file__).resolve().parent.parent
GiB = 2**30
MIN_PYTHON = (3, 10)
MIN_SHM_FREE = GiB  # chapters 01, 02 and 06 put tens of MB in /dev/shm; 1 GB leaves room for a DataLoader
NOFILE_HEADROOM = 1024  # descriptors chapter 02's "raise the limit" fix and its 200 kept tensors need
WIDGETS_EXTENSION = Path("@jupyter-widgets", "jupyterlab-manager", "package.json")
SETUP_FIRST = "run make setup first (it makes .venv with the pinned packages, as make lab does), then make check again"

__all__ = ["Result", "run_checks", "main", "summary"]


@dataclass(frozen=True)
class Result:
    """One line of the report: its status, what was checked, what was found, and the fix if not PASS."""

    status: str
    name: str
    detail: str
    fix: str = ""

    def __post_init__(self) -> None:
        if self.status not in ("PASS", "WARN", "FAIL"):
            raise ValueError(f"status must be PASS, WARN or FAIL, got {self.status!r}")
        if self.status != "PASS" and not self.fix:
            raise ValueError(f"a {self.status} needs a fix ({self.name})")

    def render(self) -> str:
        """The report line, and for WARN and FAIL the fix on the next line."""
        line = f"{self.status}  {self.name:<16} {self.detail}"
        return line if self.status == "PASS" else f"{line}\n{'':6}{'':16} fix: {self.fix}"


# ------------------------------------------------------------------------------------- the interpreter


def check_python(version: Sequence[int] = tuple(sys.version_info[:3])) -> Result:
    """The course needs 3.10+ (pyproject.toml); the stored outputs were made with 3.11."""
    shown = ".".join(map(str, version))
    if tuple(version[:2]) < MIN_PYTHON:
        return Result("FAIL", "Python", f"{shown} is too old", "install Python 3.10 or newer (3.11 is best)")
    note = "" if tuple(version[:2]) == (3, 11) else " (the stored outputs were made with 3.11)"
    return Result("PASS", "Python", f"{shown}{note}")


def in_course_venv(prefix: str = sys.prefix, base_prefix: str = sys.base_prefix, repo: Path = REPO) -> bool:
    """True when this interpreter is the one of the course's own `.venv`."""
    return prefix != base_prefix and Path(prefix).resolve() == (repo / ".venv").resolve()


def check_venv(inside: bool, has_torch: bool, executable: str = sys.executable) -> Result:
    """Inside `.venv` everything is pinned; another environment with torch (conda) may work, none cannot."""
    if inside:
        return Result("PASS", "environment", "the course's .venv")
    if has_torch:
        return Result(
            "WARN",
            "environment",
            f"not the course's .venv but {executable}, which has torch",
            "fine for conda (environment.yml); otherwise use make check, which runs .venv's Python",
        )
    return Result("FAIL", "environment", f"{executable} is not the course's .venv and has no torch", SETUP_FIRST)


# ---------------------------------------------------------------------------------------------- torch


def pinned_versions(requirements: Path = REPO / "requirements.txt", python: Sequence[int] = sys.version_info) -> dict:
    """`name -> version` of requirements.txt's `name==version` pins that apply to this Python.

    The file's only markers compare `python_version`; a pin with any other marker is kept without it.
    """
    pins: dict[str, str] = {}
    marker = re.compile(r'python_version\s*(>=|<=|==|<|>)\s*"(\d+)\.(\d+)"')
    for raw in requirements.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        found = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;]+)\s*(?:;(.*))?$", line)
        if not found:
            continue
        name, version, condition = found.group(1).lower(), found.group(2), found.group(3) or ""
        test = marker.search(condition)
        if test:
            wanted = (int(test.group(2)), int(test.group(3)))
            have = tuple(python[:2])
            ops: dict[str, Callable[[Any, Any], bool]] = {
                ">=": lambda a, b: a >= b,
                "<=": lambda a, b: a <= b,
                "==": lambda a, b: a == b,
                "<": lambda a, b: a < b,
                ">": lambda a, b: a > b,
            }
            if not ops[test.group(1)](have, wanted):
                continue
        pins[name] = version
    return pins


def _dist_name(dist: Any) -> str:
    return (dist.metadata["Name"] or "").lower()


def _dist_bytes(dist: Any) -> int:
    """Size on disk from the wheel's RECORD (sizes are listed per file; no walk of the tree needed)."""
    return sum(f.size or 0 for f in (dist.files or []))


def gpu_present() -> bool:
    """True when an NVIDIA driver shows a GPU (what a CUDA build of torch would use)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return Path("/dev/nvidia0").exists() or (gpus.is_dir() and any(gpus.iterdir()))


def check_torch(dists: Iterable[Any], pin: str | None, gpu: bool) -> Result:
    """torch at the pinned version; a CUDA build counted with its nvidia-* packages (and triton)."""
    dists = list(dists)
    torch = next((d for d in dists if _dist_name(d) == "torch"), None)
    if torch is None:
        return Result("FAIL", "torch", "not installed", SETUP_FIRST)
    extras = [d for d in dists if _dist_name(d).startswith("nvidia-") or _dist_name(d) == "triton"]
    local = torch.version.partition("+")[2]
    cuda = bool(extras) or local.startswith("cu")
    size = (_dist_bytes(torch) + sum(map(_dist_bytes, extras))) / GiB
    build = f"CUDA build, {size:.1f} GB with {len(extras)} nvidia-*/triton packages" if cuda else "CPU build"
    detail = f"{torch.version} ({build}; {size:.1f} GB on disk)" if not cuda else f"{torch.version} ({build})"
    base = torch.version.partition("+")[0]
    if pin is not None and base != pin:
        return Result(
            "WARN",
            "torch",
            f"{detail}, but requirements.txt pins {pin}",
            "run make setup to install the pin (the stored outputs and make test expect it)",
        )
    if cuda and not gpu:
        return Result(
            "WARN",
            "torch",
            f"{detail} and no NVIDIA GPU here",
            "the course needs only the CPU build: delete .venv and install torch first with "
            f"`pip install torch=={base} --index-url https://download.pytorch.org/whl/cpu` (README, Without make)",
        )
    return Result("PASS", "torch", detail)


# ---------------------------------------------------------------------------------------------- cores


def check_cores(affinity: int, machine: int | None, quota: float | None) -> Result:
    """Usable cores: the smaller of the affinity mask and the quota; the speed-up chapters need 2+."""
    usable = min(float(affinity), quota) if quota is not None else float(affinity)
    parts = [f"{affinity} of {machine or '?'} cores in the affinity mask"]
    if quota is not None:
        parts.append(f"a cgroup CPU quota of {quota:g} cores")
    detail = f"{usable:g} usable ({', '.join(parts)})"
    if usable < 2:
        return Result(
            "WARN",
            "cores",
            detail,
            "the speed-up chapters (00, 01, 03, 04, 05) need 2 or more cores to show one: give the VM or "
            "container more CPUs (e.g. docker run --cpus 2)",
        )
    if quota is not None and max(1, math.floor(quota)) < affinity:
        return Result("PASS", "cores", f"{detail}; torch's default threads ignore the quota")
    return Result("PASS", "cores", detail)


# ------------------------------------------------------------------------------------ start methods


def _answer(conn: Any) -> None:
    """Child of the start-method check: import torch, run one op, and answer with the version."""
    import torch

    torch.set_num_threads(1)  # a forked child's first parallel op must not meet a copied OpenMP pool
    conn.send((torch.__version__, float(torch.ones(8).sum())))
    conn.close()


def start_child(method: str, timeout: float) -> float:
    """Seconds from start() until a `method` child that imports torch answers; RuntimeError if it does not."""
    ctx = mp.get_context(method)
    reader, writer = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_answer, args=(writer,), daemon=True)
    started = time.perf_counter()
    child.start()
    writer.close()
    try:
        if not reader.poll(timeout):
            raise RuntimeError(f"no answer within {timeout:g} s")
        try:
            _, total = reader.recv()
        except EOFError:
            child.join(timeout)
            raise RuntimeError(f"the child exited with code {child.exitcode} before answering") from None
        if total != 8.0:
            raise RuntimeError(f"the child computed {total} instead of 8.0")
        return time.perf_counter() - started
    finally:
        reader.close()
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join(5)


def check_start_methods(timeout: float = 20.0, methods: Sequence[str] = ("fork", "spawn")) -> Result:
    """The default method, the available ones, and a fork and a spawn child that import torch, timed.

    torch is imported here first, as in a notebook: the fork child inherits it, the spawn child imports
    it again, which is the difference chapter 00 measures.
    """
    available = mp.get_all_start_methods()
    default = default_start_method()
    started = time.perf_counter()
    import torch  # noqa: F401 - imported for the fork child to inherit

    times, failed = [f"torch imported in {time.perf_counter() - started:.2f} s"], []
    for method in methods:
        if method not in available:
            times.append(f"no {method} here")
            continue
        try:
            times.append(f"{method} child answered in {start_child(method, timeout):.2f} s")
        except (OSError, RuntimeError) as error:
            failed.append(f"{method} child: {error}")
    detail = f"default {default}, available {', '.join(available)}; " + "; ".join(times + failed)
    if failed:
        fix = "re-run on an idle machine; if it fails again, run make setup to repair torch"
        return Result("FAIL", "start methods", detail, fix)
    if "fork" not in available:
        return Result(
            "WARN",
            "start methods",
            detail,
            "no fork here (Windows): the fork demos are skipped; use WSL to see them",
        )
    return Result("PASS", "start methods", detail)


# ---------------------------------------------------------------------------------- files and memory


def check_shm(path: Path = Path("/dev/shm"), minimum: int = MIN_SHM_FREE, platform: str = sys.platform) -> Result:
    """Free space where shared tensors live; Docker's default of 64 MB breaks DataLoader workers."""
    if not path.is_dir():
        if platform == "darwin":
            return Result("PASS", "/dev/shm", "none on macOS (shared memory is not a file system there)")
        return Result(
            "FAIL", "/dev/shm", f"{path} does not exist", "mount a tmpfs there (Docker: --shm-size=2g or --ipc=host)"
        )
    free = shutil.disk_usage(path).free
    detail = f"{free / GiB:.2f} GB free"
    if free < minimum:
        return Result(
            "WARN",
            "/dev/shm",
            f"{detail}, below {minimum / GiB:g} GB",
            "start the container with --shm-size=2g or --ipc=host (JupyterHub: a memory-backed volume at /dev/shm)",
        )
    return Result("PASS", "/dev/shm", detail)


def open_descriptors() -> int:
    """File descriptors this process has open now."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(folder):
            return len(os.listdir(folder))
    return 0


def check_open_files(limits: tuple[int, int] | None = None, open_now: int | None = None) -> Result:
    """The open-files limit: chapter 02 keeps hundreds of shared tensors, one descriptor each.

    A soft limit can be raised by the process itself (the chapter's fix), a hard limit only by root or
    the container's configuration, so the hard one decides.
    """
    if limits is None:
        try:
            import resource
        except ImportError:  # Windows
            return Result("PASS", "open files", "no per-process limit on this platform")
        limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, hard = limits
    now = open_descriptors() if open_now is None else open_now
    need = NOFILE_HEADROOM + now

    def shown(value: int) -> str:
        return "unlimited" if value < 0 or value >= 2**62 else str(value)

    detail = f"soft {shown(soft)}, hard {shown(hard)}, {now} open now"
    if 0 <= hard < need:
        return Result(
            "WARN",
            "open files",
            f"{detail}: chapter 02 needs a hard limit of {need} or more",
            "raise the hard limit (Docker: --ulimit nofile=4096:4096; Linux: nofile in /etc/security/limits.conf)",
        )
    if 0 <= soft < need:
        return Result("PASS", "open files", f"{detail} (`ulimit -n 4096` raises the soft limit)")
    return Result("PASS", "open files", detail)


# ------------------------------------------------------------------------------------------- network


def check_loopback(port: int = 0) -> Result:
    """A listener on 127.0.0.1 (a free port unless `port` says otherwise) accepts a connection."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", port))
            server.listen(1)
            bound = server.getsockname()[1]
            with socket.create_connection(("127.0.0.1", bound), timeout=5):
                server.settimeout(5)
                accepted, _ = server.accept()
                accepted.close()
    except OSError as error:
        return Result(
            "FAIL",
            "loopback",
            f"no listener on 127.0.0.1:{port}: {error.strerror or error}",
            "allow connections on 127.0.0.1 (a firewall or sandbox blocks them; chapter 05 needs them)",
        )
    return Result("PASS", "loopback", f"listened on 127.0.0.1:{bound} and accepted a connection")


def _run_bounded(cmd: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`subprocess.run` in a session of its own, whose whole process group is killed on a time-out: a
    command that hangs may have started children (a shell's `sleep`, unshare's target), and
    `subprocess.run` would kill only the command itself and leave them running."""
    with subprocess.Popen(
        list(cmd),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def _unshare(args: Sequence[str], unshare: str | None, timeout: float) -> str | None:
    """Run `unshare ARGS`; None on success, else its last error line."""
    if unshare is None or not Path(unshare).exists():
        return "no unshare command"
    try:
        done = _run_bounded([unshare, *args], timeout)
    except subprocess.TimeoutExpired:
        return f"no answer within {timeout:g} s"
    except OSError as error:
        return str(error)
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {done.returncode}"


_NAMESPACE_FIX = (
    "optional: allow unprivileged user namespaces (Ubuntu 24.04: "
    "sysctl kernel.apparmor_restrict_unprivileged_userns=0; Docker: --security-opt seccomp=unconfined)"
)


def check_unshare_network(
    unshare: str | None = shutil.which("unshare"), platform: str = sys.platform, timeout: float = 10.0
) -> Result:
    """`unshare -Urn`: chapter 05 runs torchrun (which listens on every interface) in a loopback-only namespace."""
    if not platform.startswith("linux"):
        return Result("PASS", "unshare -Urn", "not Linux: chapter 05 runs torchrun without a private network")
    error = _unshare(["-Urn", "true"], unshare, timeout)
    if error is None:
        return Result("PASS", "unshare -Urn", "private network namespaces work (chapter 05)")
    return Result(
        "WARN",
        "unshare -Urn",
        f"unavailable ({error}): chapter 05's torchrun demos listen on every interface for a few seconds",
        _NAMESPACE_FIX,
    )


def check_unshare_mount(
    unshare: str | None = shutil.which("unshare"), platform: str = sys.platform, timeout: float = 10.0
) -> Result:
    """`unshare -Urm` plus a tmpfs mount: chapter 06 fills a private 64 MB /dev/shm, not the real one."""
    if not platform.startswith("linux"):
        return Result("PASS", "unshare -Urm", "not Linux: chapter 06 shows its recorded /dev/shm result")
    shell = "mount -t tmpfs -o size=1m tmpfs /dev/shm && test -d /dev/shm"
    error = _unshare(["-Urm", "sh", "-c", shell], unshare, timeout)
    if error is None:
        return Result("PASS", "unshare -Urm", "a private tmpfs /dev/shm can be mounted (chapter 06)")
    return Result(
        "WARN",
        "unshare -Urm",
        f"unavailable ({error}): chapter 06 shows its recorded /dev/shm result instead of running it",
        _NAMESPACE_FIX,
    )


# ---------------------------------------------------------------------------------------------- py-spy

_TARGET = """
import sys, time
def waiting_for_py_spy():
    print("ready", flush=True)
    time.sleep(60)
waiting_for_py_spy()
"""


def ptrace_scope(path: Path = Path("/proc/sys/kernel/yama/ptrace_scope")) -> int | None:
    """Yama's ptrace_scope (0: any process of yours, 1: descendants only, 2: admin only, 3: none)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _py_spy_path() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def check_py_spy(spy: str | None, scope: int | None, timeout: float = 15.0, python: str = sys.executable) -> Result:
    """`py-spy dump --pid` of a sibling Python process, as chapter 06 runs it.

    Without ptrace permission py-spy suggests sudo, which does not help in a container without
    SYS_PTRACE; with ptrace_scope 1 it may attach only to its own descendants, and the sibling fails.
    """
    if spy is None or not Path(spy).exists():
        return Result("FAIL", "py-spy", "not installed", "run make setup (py-spy is pinned in requirements.txt)")
    target = subprocess.Popen(
        [python, "-c", _TARGET], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert target.stdout is not None
        if not target.stdout.readline():  # the interpreter is up and inside the function, or it died
            fix = "run make setup again (this Python could not run a one-line script)"
            return Result("FAIL", "py-spy", f"the target process exited with code {target.wait(5)}", fix)
        done = _run_bounded([spy, "dump", "--pid", str(target.pid)], timeout)
    except subprocess.TimeoutExpired:
        done = None
    finally:
        target.kill()
        target.wait(5)
        if target.stdout is not None:
            target.stdout.close()
    if done is not None and done.returncode == 0 and "waiting_for_py_spy" in done.stdout:
        note = " (ptrace_scope 1: only descendants, unless you have CAP_SYS_PTRACE as here)" if scope == 1 else ""
        return Result("PASS", "py-spy", f"attached to a child and read its stack{note}")
    said = "no answer" if done is None else (done.stderr or done.stdout).strip().splitlines()[:1]
    said = said[0] if isinstance(said, list) and said else said or "no output"
    said = re.sub(r"\x1b\[[0-9;]*m", "", str(said))[:120]
    if scope == 1:
        reason = "Yama's ptrace_scope is 1 (Ubuntu's default): py-spy may attach only to processes it started"
        fix = (
            "chapter 06 then shows the faulthandler route; to use py-spy, run it with sudo or "
            "`sudo sysctl kernel.yama.ptrace_scope=0` (until reboot)"
        )
    elif scope is not None and scope >= 2:
        reason = f"Yama's ptrace_scope is {scope}: only an administrator may attach"
        fix = "chapter 06 then shows the faulthandler route; py-spy needs sudo here"
    else:
        reason = "this system does not allow ptrace (a container without SYS_PTRACE, whatever py-spy suggests)"
        fix = "chapter 06 then shows the faulthandler route; in Docker add --cap-add SYS_PTRACE to use py-spy"
    return Result("WARN", "py-spy", f"cannot attach to a child: {reason} (py-spy said: {said})", fix)


# --------------------------------------------------------------------------------------------- Jupyter


def labextension_paths() -> list[Path]:
    """Where JupyterLab looks for prebuilt extensions (jupyter_core's data path + `labextensions`)."""
    try:
        from jupyter_core.paths import jupyter_path
    except ImportError:
        return [Path(sys.prefix, "share", "jupyter", "labextensions")]
    return [Path(p) for p in jupyter_path("labextensions")]


def check_jupyter(
    version: Callable[[str], str] = importlib.metadata.version,
    paths: Sequence[Path] | None = None,
    pins: dict | None = None,
) -> Result:
    """JupyterLab, ipykernel and ipywidgets installed, and the widgets manager among the lab extensions.

    Looking for the extension's package.json answers in milliseconds, `jupyter labextension list` in
    seconds; without the extension every slider of chapters 01 and 04 shows as text.
    """
    found, missing = [], []
    for name in ("jupyterlab", "ipykernel", "ipywidgets"):
        try:
            have = version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        wanted = (pins or {}).get(name)
        found.append(have if wanted in (None, have) else f"{have} (pinned {wanted})")
        found[-1] = f"{name} {found[-1]}"
    if missing:
        return Result("FAIL", "Jupyter", f"missing: {', '.join(missing)}", "run make setup")
    places = list(paths) if paths is not None else labextension_paths()
    extension = next((p / WIDGETS_EXTENSION for p in places if (p / WIDGETS_EXTENSION).is_file()), None)
    detail = ", ".join(found)
    if extension is None:
        return Result(
            "FAIL",
            "Jupyter",
            f"{detail}; no widgets extension (@jupyter-widgets/jupyterlab-manager) in the labextension paths",
            "reinstall the package that ships it: .venv/bin/python -m pip install --force-reinstall --no-deps "
            "jupyterlab_widgets",
        )
    if any("pinned" in part for part in found):
        return Result("WARN", "Jupyter", f"{detail}; widgets extension found", "run make setup to install the pins")
    return Result("PASS", "Jupyter", f"{detail}; widgets extension found")


def check_root(euid: int | None = os.geteuid() if hasattr(os, "geteuid") else None) -> Result:
    """JupyterLab refuses to start as root without `--allow-root`."""
    if euid == 0:
        return Result(
            "WARN",
            "user",
            "running as root: JupyterLab refuses to start without --allow-root",
            "make lab adds --allow-root by itself as root; to start JupyterLab by hand, add --allow-root",
        )
    return Result("PASS", "user", "not root")


# ---------------------------------------------------------------------------------------------- report


def _guarded(name: str, check: Callable[[], Result]) -> Result:
    """Run one check; a check that breaks is a FAIL line, never a traceback."""
    try:
        return check()
    except Exception as error:  # noqa: BLE001 - the report must go on whatever one check hits
        return Result(
            "FAIL",
            name,
            f"the check itself failed: {type(error).__name__}: {error}",
            "send this output to the instructor",
        )


def _has(name: str) -> bool:
    try:
        importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def run_checks(emit: Callable[[Result], None] = lambda r: None) -> list[Result]:
    """Every check in report order; `emit` sees each result as soon as it is known (the report streams)."""
    inside = in_course_venv()
    has_torch = _has("torch")
    full = inside or has_torch
    try:
        pins = pinned_versions()
    except (OSError, UnicodeDecodeError):  # no readable requirements.txt: compare with nothing
        pins = {}
    checks: list[tuple[str, Callable[[], Result]]] = [
        ("Python", check_python),
        ("environment", lambda: check_venv(inside, has_torch)),
    ]
    if full:
        checks += [
            ("torch", lambda: check_torch(importlib.metadata.distributions(), pins.get("torch"), gpu_present())),
        ]
    checks += [
        ("cores", lambda: check_cores(usable_cores(), os.cpu_count(), cpu_quota())),
    ]
    if full:
        checks.append(("start methods", check_start_methods))
    checks += [
        ("/dev/shm", check_shm),
        ("open files", check_open_files),
        ("loopback", check_loopback),
        ("unshare -Urn", check_unshare_network),
        ("unshare -Urm", check_unshare_mount),
    ]
    if full:
        checks += [
            ("py-spy", lambda: check_py_spy(_py_spy_path(), ptrace_scope())),
            ("Jupyter", lambda: check_jupyter(pins=pins)),
        ]
    checks.append(("user", check_root))
    results = []
    for name, check in checks:
        results.append(_guarded(name, check))
        emit(results[-1])
    return results


def summary(results: Sequence[Result], seconds: float) -> str:
    """The closing line: counts, time, and the verdict."""
    counts = {s: sum(r.status == s for r in results) for s in ("PASS", "WARN", "FAIL")}
    head = f"{counts['PASS']} PASS, {counts['WARN']} WARN, {counts['FAIL']} FAIL in {seconds:.1f} s: "
    if counts["FAIL"]:
        failed = [r for r in results if r.status == "FAIL"]
        if any(r.fix == SETUP_FIRST for r in failed):
            return head + "not ready: run make setup first"
        return head + "not ready: fix the FAIL lines above"
    if counts["WARN"]:
        return head + "ready for the course (read the WARN lines: they say what will look different)"
    return head + "ready for the course"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; exit status 1 when a check FAILs, else 0."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args:
        print("usage: make check   (or: python -m helpers.setup_check); it takes no arguments", file=sys.stderr)
        return 2
    print(textwrap.fill(f"Checking this machine for the PyTorch multiprocessing course ({sys.executable})", 100))
    started = time.perf_counter()
    results = run_checks(emit=lambda r: print(r.render(), flush=True))
    print(summary(results, time.perf_counter() - started))
    return 1 if any(r.status == "FAIL" for r in results) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
