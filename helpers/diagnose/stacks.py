"""The stacks of every process of the tree, and what each process is (its role).

`py-spy dump --json --native --locals` first (it reads the process from outside: native frames show
libgomp's barrier, locals show a rank); where py-spy is missing or cannot attach (no ptrace
permission), the faulthandler file that `helpers/diagnose_site/sitecustomize.py` armed in each Python
process when it started, written on SIGUSR2. Each process says which source its stack came from, and
why py-spy could not attach.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from helpers.watchdog import FAULTHANDLER_BLOCK, FAULTHANDLER_FRAME, enclosing_qualname

_DUMP_GRACE = 1.5  # seconds the processes get to write their faulthandler dump
_SPY_TIMEOUT = 15.0
DUMP_SIGNAL = signal.SIGUSR2


@dataclass
class Frame:
    name: str  # qualified where known: `Queue.get`
    file: str  # full path ('' for a native frame without one)
    line: int
    native: bool = False
    locals: dict[str, str] = field(default_factory=dict)

    def short(self) -> str:
        where = os.path.basename(self.file) if self.file else "?"
        if self.native:  # C++ template names can run to kilobytes
            name = self.name if len(self.name) <= 100 else self.name[:99] + "…"
            return f"{name} ({where})"
        parts = Path(self.file).parts
        if "site-packages" in parts:  # torch/distributed/distributed_c10d.py, as py-spy shows it
            where = "/".join(parts[parts.index("site-packages") + 1 :])
        elif len(parts) > 1 and re.fullmatch(r"python3\.\d+", parts[-2] if len(parts) > 1 else ""):
            where = parts[-1]
        elif len(parts) > 2 and re.fullmatch(r"python3\.\d+", parts[-3]):
            where = "/".join(parts[-2:])  # multiprocessing/queues.py
        return f"{self.name} ({where}:{self.line})"


@dataclass
class Thread:
    name: str
    idle: bool | None  # None: unknown (faulthandler does not say)
    frames: list[Frame]  # innermost first

    def python_frames(self) -> list[Frame]:
        return [f for f in self.frames if not f.native]


@dataclass
class Proc:
    pid: int
    ppid: int
    cmdline: list[str]
    name: str
    status: str
    threads_count: int
    env: dict[str, str]
    forked: bool  # started by fork without exec: same program as its parent
    libgomp: bool  # GNU OpenMP is loaded
    role: str = ""
    rank: int | None = None
    cpu: float | None = None  # share of one core it used while diagnose watched (sample_cpu), 0..n
    cpu_life: float | None = None  # share of one core over its whole life so far (sample_cpu), 0..n
    threads_at_fork: int | None = None  # its parent's threads when it forked (sitecustomize's note)
    threads: list[Thread] = field(default_factory=list)
    source: str = ""  # "py-spy", "py-spy (no native frames)", "faulthandler", or ""
    note: str = ""  # why there is no stack, or why py-spy was not used

    def label(self) -> str:
        return f"pid {self.pid} ({self.role})"

    def main_thread(self) -> Thread | None:
        for thread in self.threads:
            if thread.name in ("MainThread", "main"):
                return thread
        return self.threads[0] if self.threads else None

    def all_frames(self) -> list[Frame]:
        return [f for t in self.threads for f in t.frames]


_ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def _environ(pid: int) -> dict[str, str]:
    """The variables of its starting environment that tell a rank (torchrun sets them before exec)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, _, value = item.decode(errors="replace").partition("=")
        if key in _ENV_KEYS:
            env[key] = value
    return env


def _maps_libgomp(pid: int) -> bool:
    try:
        return "libgomp" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def catches(pid: int, sig: int) -> bool:
    """True when the process has a handler for `sig` (its SigCgt mask), i.e. faulthandler is armed:
    sending SIGUSR2 to anything else would kill it."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def describe(procs: list[psutil.Process]) -> list[Proc]:
    """What psutil and /proc say about each process (before any stack is taken)."""
    found = []
    by_pid = {p.pid: p for p in procs}
    for proc in procs:
        try:
            with proc.oneshot():
                cmdline, ppid, name = proc.cmdline(), proc.ppid(), proc.name()
                status, threads = proc.status(), proc.num_threads()
        except psutil.Error:
            continue
        parent = by_pid.get(ppid)
        forked = False
        if parent is not None:
            with contextlib.suppress(psutil.Error):
                forked = parent.cmdline() == cmdline and parent.exe() == proc.exe()
        found.append(
            Proc(
                pid=proc.pid,
                ppid=ppid,
                cmdline=cmdline,
                name=name,
                status=status,
                threads_count=threads,
                env=_environ(proc.pid),
                forked=forked,
                libgomp=_maps_libgomp(proc.pid),
            )
        )
    return found


def py_spy_path() -> str | None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return spy if Path(spy).exists() else None


def _spy(spy: str, pid: int, native: bool, on_start) -> tuple[list[Thread] | None, str]:
    args = [spy, "dump", "--json", "--locals", "--pid", str(pid)] + (["--native"] if native else [])
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError as exc:
        return None, str(exc)
    on_start(proc.pid)
    try:
        out, err = proc.communicate(timeout=_SPY_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, f"py-spy took more than {_SPY_TIMEOUT:g} s"
    if proc.returncode != 0:
        text = re.sub(r"\x1b\[[0-9;]*m", "", err.decode(errors="replace")).strip()
        first = next((line for line in text.splitlines() if line.strip()), f"exit code {proc.returncode}")
        return None, first.removeprefix("Error: ")
    try:
        return _parse_spy(json.loads(out)), ""
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"unreadable py-spy output ({exc})"


def _ours(thread: Thread) -> bool:
    """diagnose's own Flight Recorder thread (helpers/diagnose_site), left out of the stacks."""
    return any(f.name.endswith("_fr_listen") and "diagnose_site" in f.file for f in thread.frames)


def _parse_spy(data: list[dict]) -> list[Thread]:
    threads = []
    for item in data:
        frames = []
        for f in item.get("frames", []):
            filename = f.get("filename", "")
            # C frames with line numbers (socketmodule.c:921) are native too: "Python frames" are .py files
            native = not filename.endswith(".py") and not filename.startswith("<")
            local_vars = {v["name"]: v.get("repr", "") for v in (f.get("locals") or [])}
            frames.append(Frame(f["name"], f.get("filename", ""), int(f.get("line", 0)), native, local_vars))
        threads.append(Thread(item.get("thread_name") or hex(item.get("thread_id", 0)), not item["active"], frames))
    return [t for t in threads if not _ours(t)]


def _status(pid: int) -> str:
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return psutil.STATUS_DEAD


def take_with_py_spy(procs: list[Proc], spy: str, on_start) -> None:
    """py-spy each process, in parallel (each dump pauses its process for a fraction of a second);
    with native frames first, without them where native unwinding fails."""

    def one(proc: Proc) -> None:
        threads, error = _spy(spy, proc.pid, True, on_start)
        source = "py-spy"
        if threads is None and "python" in error.lower() and "version" in error.lower():
            proc.note = "not a Python process"
            return
        if threads is None:
            threads, second = _spy(spy, proc.pid, False, on_start)
            source = "py-spy (no native frames: " + error + ")"
            error = second or error
        if threads is None:
            gone = not psutil.pid_exists(proc.pid) or _status(proc.pid) == psutil.STATUS_ZOMBIE
            proc.note = "ended before its stack could be taken" if gone else f"py-spy could not attach: {error}"
            return
        proc.threads, proc.source = threads, source

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, procs))


def take_with_faulthandler(procs: list[Proc], folder: Path) -> None:
    """Ask each armed process for a faulthandler dump (SIGUSR2) and read its file."""
    asked = []
    for proc in procs:
        if proc.threads or not catches(proc.pid, DUMP_SIGNAL):
            if not proc.threads and not proc.note:
                proc.note = "no stack: faulthandler is not armed in it (not a Python process started by the command?)"
            elif not proc.threads:
                proc.note += "; faulthandler is not armed in it either"
            continue
        path = folder / f"stack-{proc.pid}.txt"
        size = path.stat().st_size if path.exists() else 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, DUMP_SIGNAL)
            asked.append((proc, path, size))
    deadline = time.monotonic() + _DUMP_GRACE
    pending = list(asked)
    last: dict[int, int] = {}
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        for item in list(pending):
            proc, path, size = item
            now = path.stat().st_size if path.exists() else 0
            if now > size and last.get(proc.pid) == now:
                pending.remove(item)
            last[proc.pid] = now
    for proc, path, size in asked:
        text = path.read_text(errors="replace")[size:] if path.exists() else ""
        proc.threads = parse_faulthandler(text)
        if proc.threads:
            proc.source = "faulthandler" + (f" ({proc.note})" if proc.note else "")
            proc.note = ""
        else:
            proc.note = (proc.note + "; " if proc.note else "") + "faulthandler wrote no stack in time"


def parse_faulthandler(text: str) -> list[Thread]:
    """Every thread of one faulthandler dump (`Current thread 0x...` / `Thread 0x...` blocks)."""
    threads: list[Thread] = []
    for line in text.splitlines():
        head = FAULTHANDLER_BLOCK.match(line)
        if head or line.startswith("Stack (most recent call first)"):
            threads.append(Thread(head.group(1) if head else "thread", None, []))
            continue
        frame = FAULTHANDLER_FRAME.match(line)
        if frame and threads:
            file, lineno, name = frame.group(1), int(frame.group(2)), frame.group(3)
            threads[-1].frames.append(Frame(enclosing_qualname(file, lineno, name), file, lineno))
    threads = [t for t in threads if not _ours(t)]
    _name_main_thread(threads)
    return threads


def _name_main_thread(threads: list[Thread]) -> None:
    """faulthandler names threads by address only; the main thread is the first one that was not
    started by `threading` (whose outermost frame is `Thread._bootstrap`)."""
    named = False
    for thread in threads:
        outer = thread.frames[-1] if thread.frames else None
        started_by_threading = outer is not None and outer.file.endswith("threading.py")
        if not named and not started_by_threading:
            thread.name, named = "MainThread", True
        elif thread.name == "MainThread":
            thread.name = "thread"


def sample_cpu(procs: list[Proc], seconds: float = 0.5) -> None:
    """How busy each process is now: CPU time used over `seconds`, as a share of one core (a slow
    script runs near 1.0; a hung one waits near 0)."""

    def cpu_of(pid: int) -> tuple[float, float] | None:
        try:
            process = psutil.Process(pid)
            times = process.cpu_times()
            return times.user + times.system, process.create_time()
        except psutil.Error:
            return None

    before = {p.pid: cpu_of(p.pid) for p in procs}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    for proc in procs:
        now, then = cpu_of(proc.pid), before.get(proc.pid)
        proc.cpu = None if now is None or then is None else max(0.0, (now[0] - then[0]) / elapsed)
        # on a loaded machine half a second can catch a running process between time slices: its
        # whole life says more (a hung one spent most of its life waiting)
        alive = None if now is None else time.time() - now[1]
        proc.cpu_life = None if now is None or not alive or alive <= 0 else now[0] / alive


_FORK_NOTE = re.compile(r"^# pid (\d+) ppid \d+ forked with (\d+) thread")


def read_fork_notes(procs: list[Proc], folder: Path) -> None:
    """Each forked process's parent's thread count at the fork, from the first line of its file."""
    for proc in procs:
        path = folder / f"stack-{proc.pid}.txt"
        try:
            with path.open(errors="replace") as f:
                match = _FORK_NOTE.match(f.readline())
        except OSError:
            continue
        if match:
            proc.threads_at_fork = int(match.group(2))


@dataclass
class Ended:
    """A child of the command that its parent reaped: who reaped it, its exit code (-N: signal N), when."""

    pid: int
    parent: int
    code: int
    at: float


def ended(folder: Path) -> dict[int, Ended]:
    """The `ended-<pid>.txt` notes sitecustomize's os.waitpid wrapper left."""
    found = {}
    for path in folder.glob("ended-*.txt"):
        try:
            parent, code, at = path.read_text().split()[:3]
            pid = int(path.stem.split("-", 1)[1])
            found[pid] = Ended(pid, int(parent), int(code), float(at))
        except (OSError, ValueError):
            continue
    return found


def fatal_reports(folder: Path) -> dict[int, str]:
    """faulthandler's "Fatal Python error" reports, by pid: a process that died of SIGSEGV, SIGBUS..."""
    found = {}
    for path in folder.glob("stack-*.txt"):
        text = path.read_text(errors="replace")
        at = text.find("Fatal Python error")
        if at >= 0:
            with contextlib.suppress(ValueError):
                found[int(path.stem.split("-", 1)[1])] = text[at:]
    return found


# ---- roles ----------------------------------------------------------------------------------------

_TORCHRUN = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def _has(proc: Proc, name: str, file_part: str) -> Frame | None:
    for frame in proc.all_frames():
        if frame.name.split(".")[-1] == name and file_part in frame.file:
            return frame
    return None


def _spawn_rank(proc: Proc) -> int | None:
    frame = _has(proc, "_wrap", "torch/multiprocessing/spawn.py")
    if frame is not None and frame.locals.get("i", "").isdigit():
        return int(frame.locals["i"])
    return None


def assign_roles(procs: list[Proc], main_pid: int) -> None:
    """Name each process: main process, torchrun agent, rank N, DataLoader/pool worker, resource
    tracker, forkserver, torch_shm_manager, or a plain child (fork or spawn)."""
    for proc in procs:
        command = " ".join(proc.cmdline)
        rank = proc.env.get("RANK", "")
        proc.rank = int(rank) if rank.isdigit() else _spawn_rank(proc)
        if proc.pid == main_pid and any(t in command for t in _TORCHRUN):
            proc.role = "torchrun agent"
        elif "multiprocessing.resource_tracker" in command:
            proc.role = "resource tracker"
        elif "multiprocessing.forkserver" in command:
            proc.role = "forkserver"
        elif proc.name.startswith("torch_shm_manag"):
            proc.role = "torch_shm_manager"
        elif _has(proc, "_worker_loop", "torch/utils/data/_utils/worker.py"):
            proc.role = "DataLoader worker"
        elif _has(proc, "worker", "multiprocessing/pool.py"):
            proc.role = "pool worker"
        elif _has(proc, "_process_worker", "concurrent/futures/process.py"):
            proc.role = "ProcessPoolExecutor worker"
        elif proc.pid == main_pid:
            proc.role = "main process"
        elif proc.rank is not None and ("TORCHELASTIC_RUN_ID" in proc.env or _has(proc, "_wrap", "spawn.py")):
            proc.role = f"rank {proc.rank}"
            continue
        else:
            how = "fork" if proc.forked else "spawn" if "--multiprocessing-fork" in command else "exec"
            proc.role = f"child process ({how})"
        if proc.rank is not None and proc.role != "torchrun agent":
            proc.role += f" of rank {proc.rank}" if "worker" in proc.role else f", rank {proc.rank}"
