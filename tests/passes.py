"""Run the passes of `make test`, side by side where that is safe: `python tests/passes.py [--under-load]`.

`make test` validates every notebook under each start method a learner's platform may default to: the
platform's own (fork on Linux up to Python 3.13; it also runs the unit tests, the hygiene checks and lint),
spawn (macOS, Windows; this pass runs the learner edition of `make student`, see `default_passes`) and
forkserver (Linux from Python 3.14). One pass after another takes longer than a
maintainer waits, yet most of a notebook's time is spent waiting (on children importing torch, on hang
demos' deadlines), so the passes run concurrently when each can get a /dev/shm of its own: the suite's
hygiene check fails on any shared-memory file left behind, and one pass must not see another's live files.
That needs a private mount namespace (`unshare -m` as root, `unshare -Urm` elsewhere on Linux); where
neither works the passes run one after another. Each pass also gets a temporary folder of its own
(TMPDIR), which the hygiene check watches too. The notebooks pass strict nbval under load
(`make test-under-load`), which is what makes running them side by side safe.

Each pass's output is shown whole when it ends; the last line sums them up as `N passed, N failed`.
`--under-load` instead runs the notebooks of the default pass with a busy loop on every usable core.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10: requirements.txt installs tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
STUDENT_CHECK = "build/student_check"  # git-ignored
SUMMARY = re.compile(r"=+ (?P<body>.*\d+ (passed|failed|error).*) in [\d.]+s")


@dataclass
class Pass:
    name: str
    args: list[str]
    pythonpath: str | None = None
    env: dict[str, str] = field(default_factory=dict)


def default_passes() -> list[Pass]:
    import multiprocessing as mp

    passes = [
        # Each test file that starts processes in a pytest process of its own (the light ones share one,
        # see SHARED_PROCESS): a test that leaves multiprocessing's or torch's process-wide state changed
        # (seen: every later DataLoader batch lost) cannot break another file.
        Pass(
            "unit tests, hygiene, lint (one to three pytest processes at a time, as the cores allow)",
            [str(Path(__file__)), "--unit-files", "--jobs", "3", "--adapt"],
        ),
        Pass("notebooks, the default start method", ["-m", "pytest", "--nbval", "notebooks"]),
    ]
    methods = mp.get_all_start_methods()
    if "spawn" in methods:
        # The learner edition (`make student`: solutions replaced by a note) with its stored outputs, strictly:
        # every other cell is checked under spawn, the edition a learner gets is proven to run, and each
        # checker's stored "Not yet" for the unedited placeholder must come out again. The solutions run in
        # the other two passes, and the checker tests feed each solution to its checker.
        passes.append(
            Pass("learner edition, spawn as the default", ["-m", "pytest", "--nbval", STUDENT_CHECK], "force_spawn")
        )
    if "forkserver" in methods:
        passes.append(
            Pass("notebooks, forkserver as the default", ["-m", "pytest", "--nbval", "notebooks"], "force_forkserver")
        )
    for method in sorted({"spawn", "forkserver"} - set(methods)):
        print(f"passes: no {method} start method on this platform; its pass is skipped", flush=True)
    return passes


def build_learner_edition() -> None:
    """Write the learner edition, stored outputs kept, where the spawn pass validates it."""
    subprocess.run(
        [sys.executable, "-m", "helpers.student", "--keep-outputs", "--out", str(ROOT / STUDENT_CHECK)],
        cwd=ROOT, check=True,
    )  # fmt: skip


def private_shm_prefix() -> list[str] | None:
    """The command prefix that gives a child its own /dev/shm, or None where that is not possible."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None or not Path("/dev/shm").is_dir():
        return None
    size = shutil.disk_usage("/dev/shm").total
    inner = f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$@"'
    for flags in (["-m", "--propagation", "private"], ["-Urm", "--propagation", "private"]):
        probe = ["unshare", *flags, "sh", "-c", inner, "sh", "true"]
        try:
            if subprocess.run(probe, capture_output=True, timeout=20, check=False).returncode == 0:
                return ["unshare", *flags, "sh", "-c", inner, "sh"]
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def _env_for(p: Pass, tmpdir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = tmpdir
    if p.pythonpath:
        extra = str(ROOT / "tests" / p.pythonpath)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [extra, env.get("PYTHONPATH")]))
    env.update(p.env)
    return env


def _counts(log: str) -> dict[str, int]:
    """The counts of every pytest summary line in `log`, added up (a pass may run several sessions)."""
    total: dict[str, int] = {}
    for body, _ in SUMMARY.findall(log):
        for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed)", body):
            total[word] = total.get(word, 0) + int(n)
    return total


@dataclass
class Job:
    """One command of a pass or of the unit-test pass, with its environment and the file its output goes to.
    A job that `waits` spends most of its time waiting, not computing (see `WAITING`)."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    log: Path
    waits: bool = False


def _next_job(
    pending: list[Job], running: list[Job], may_add: Callable[[float], bool] | None, since: float
) -> Job | None:
    """The job to start now beside `running`, or None: the first job when none runs; else a job that does
    not wait when only jobs that wait run (one job that computes always runs); else a job that waits when no
    other one that waits runs (it takes little CPU from the others, see `WAITING`); else, when
    `may_add(since)` agrees, the next job in order."""
    if not running:
        return pending[0]
    if all(job.waits for job in running):
        computing = next((job for job in pending if not job.waits), None)
        if computing is not None:
            return computing
    if not any(job.waits for job in running):
        waiting = next((job for job in pending if job.waits), None)
        if waiting is not None:
            return waiting
    if may_add is None or may_add(since):
        return pending[0]
    return None


def run_jobs(
    jobs: list[Job],
    limit: int,
    finished: Callable[[Job, int, float, float], None],
    announce: bool = False,
    may_add: Callable[[float], bool] | None = None,
) -> None:
    """Run `jobs` in the order given, at most `limit` at a time, and call `finished(job, exit code,
    seconds, CPU seconds)` as each one ends (its CPU time includes every process it waited for, e.g. a
    notebook's kernel and the workers the kernel started). With `may_add`, a job beyond the first one
    running starts only when `may_add(seconds since the last start)` says so (see `IdleMeter`), except
    that one job that `waits` may always run beside the others (see `_next_job`). With
    `announce`, say when each starts and, every minute, which are still running. Whatever happens
    (Ctrl-C, an error in `finished`), no job is left running."""
    pending = list(jobs)
    running: list[tuple[Job, subprocess.Popen[bytes], float]] = []
    t_all = last_note = last_start = time.monotonic()
    try:
        while pending or running:
            while pending and len(running) < limit:
                job = _next_job(pending, [entry[0] for entry in running], may_add, time.monotonic() - last_start)
                if job is None:
                    break
                pending.remove(job)
                with job.log.open("wb") as out:
                    proc = subprocess.Popen(job.cmd, cwd=ROOT, env=job.env, stdout=out, stderr=subprocess.STDOUT)
                last_start = time.monotonic()
                running.append((job, proc, last_start))
                if announce:
                    print(f"passes: started '{job.name}'", flush=True)
            done = []
            for entry in list(running):
                before = _children_cpu()
                if entry[1].poll() is not None:  # reaped now: its CPU time joins RUSAGE_CHILDREN
                    running.remove(entry)
                    done.append((entry, _children_cpu() - before))
            for (job, proc, started), cpu in done:
                finished(job, proc.returncode, time.monotonic() - started, cpu)
            if announce and running and time.monotonic() - last_note > 60:
                names = ", ".join(f"'{entry[0].name}'" for entry in running)
                print(f"passes: still running after {(time.monotonic() - t_all) / 60:.0f} min: {names}", flush=True)
                last_note = time.monotonic()
            if not done:
                time.sleep(0.2)
    finally:
        for _, proc, _ in running:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _children_cpu() -> float:
    """User and system CPU seconds of every child this process has reaped, with their reaped descendants."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class IdleMeter:
    """Is the machine idle enough for one more unit-test process? (`may_add` of `run_jobs`)

    The unit pass runs beside the three notebook passes, and its files are many short jobs while the
    notebook passes are three long ones, so it is the one that can adapt. Two unit files at a time beside
    them oversubscribe the 2 cores for most of the run (every process slower, and more CPU spent in all),
    yet when the notebook passes wait (on deadlines, on sleeping demos, at their end) the cores idle. So
    one unit file always runs, and another one starts only when at least `share` of the machine's CPU time
    was idle over the last `window` seconds and the last start is that long ago (its own start-up counts
    as load before the next decision)."""

    def __init__(
        self,
        share: float = 0.3,
        window: float = 5.0,
        cpu_times: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if cpu_times is None:
            import psutil

            cpu_times = psutil.cpu_times
        self._cpu_times, self._clock = cpu_times, clock
        self.share, self.window = share, window
        self._samples: list[tuple[float, float, float]] = []  # (time, idle seconds, all seconds)

    def idle_share(self) -> float | None:
        """The idle share of all CPU time over the last `window` seconds; None until a window has passed."""
        times = self._cpu_times()
        now = self._clock()
        idle = times.idle + getattr(times, "iowait", 0.0)
        total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)  # in user already
        self._samples.append((now, idle, total))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window:
            self._samples.pop(0)
        t0, idle0, all0 = self._samples[0]
        if now - t0 < self.window or total <= all0:
            return None
        return (idle - idle0) / (total - all0)

    def __call__(self, since_last_start: float) -> bool:
        share = self.idle_share()
        return since_last_start >= self.window and share is not None and share >= self.share


# Test files that start no worker, pool, group or kernel and change no process-wide state of torch or
# multiprocessing: they share one pytest process (each process costs about 1 s of CPU to start, more with
# torch imported; nbval is kept out, see `without_nbval`). Every other file gets a process of its own.
SHARED_PROCESS = (
    "test_cheatsheet.py",
    "test_checks.py",
    "test_errors.py",
    "test_kernel.py",
    "test_lab_check.py",
    "test_lint.py",
    "test_machine_speed.py",
    "test_main_path.py",
    "test_notebooks.py",
    "test_passes.py",
    "test_plots.py",
    "test_regenerate.py",
    "test_setup.py",
    "test_site.py",
    "test_student.py",
    "test_threads.py",
    "test_timing.py",
    "test_validate.py",
)


# Test files that mostly wait (on the timeouts of hang demos and checkers, on children that sleep): in
# clean runs of `make test` each used under 40 % of one core over its run (e.g. test_checkers_pitfalls.py
# 33-35 s of CPU in 175-182 s). One of them at a time runs beside the unit pass's other files instead of
# holding its only slot: about 10 minutes of waiting that no longer lengthens the pass, for little CPU.
WAITING = (
    "test_checkers_pitfalls.py",
    "test_checkers_pool.py",
    "test_checkers_sharing.py",
    "test_diagnose.py",
    "test_launcher.py",
    "test_pitfalls.py",
    "test_watchdog.py",
    "test_worker_deaths.py",
)


def unit_groups(files: list[Path]) -> list[list[Path]]:
    """The pytest processes of the unit pass: the `SHARED_PROCESS` files together, each other file alone;
    the largest first, so that the last one to finish is a short one."""
    shared = [f for f in files if f.name in SHARED_PROCESS]
    groups = [[f] for f in files if f.name not in SHARED_PROCESS] + ([shared] if shared else [])
    return sorted(groups, key=lambda g: sum(f.stat().st_size for f in g), reverse=True)


def without_nbval() -> list[str]:
    """pytest options that keep the nbval and anyio plugins out of a unit-test process.

    pytest loads every installed plugin in every process: importing nbval (jupyter_client, nbformat and
    its JSON-schema checks) costs about 2.3 s of CPU and anyio's (installed for JupyterLab) 0.3 s, over a
    minute in all for the unit pass's 27 processes, whose tests open no notebook and await nothing.
    Without nbval, the `--nbval-*` options of pyproject.toml's `addopts` would be unknown, so `addopts`
    is given again without them."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        addopts = tomllib.load(f)["tool"]["pytest"]["ini_options"]["addopts"]
    kept = [opt for opt in addopts if not opt.startswith("--nbval")]
    return ["-p", "no:nbval", "-p", "no:anyio", "-o", f"addopts={shlex.join(kept)}"]


def run_unit_files(extra: list[str], jobs: int, files: list[Path] | None = None, adapt: bool = False) -> int:
    """Run tests/test_*.py in the pytest processes that `unit_groups` makes, `jobs` at a time (with
    `adapt`, one at a time, one of the `WAITING` files beside it, and more up to `jobs` while the machine
    has idle CPU, see `IdleMeter`); 1 if any failed.

    With more than one job, each process gets a /dev/shm and a temporary folder of its own (the hygiene
    check of one file must not see another's live files). Each process's output is shown whole when it
    ends."""
    groups = unit_groups(list(files or (ROOT / "tests").glob("test_*.py")))
    prefix = private_shm_prefix() if jobs > 1 else None
    if prefix is None:
        jobs = 1
    base = Path(tempfile.mkdtemp(prefix="unit-", dir=os.environ.get("TMPDIR")))
    worst = 0
    cpus: list[tuple[float, float, str]] = []

    def finished(job: Job, code: int, seconds: float, cpu: float) -> None:
        nonlocal worst
        if code not in (0, 5):  # 5: no test collected
            worst = 1
        sys.stdout.write(job.log.read_text(errors="replace"))
        cpus.append((cpu, seconds, job.name))
        sys.stdout.flush()

    todo = []
    for i, group in enumerate(groups):
        tmpdir = base / f"tmp{i}"
        tmpdir.mkdir()
        paths = [str(path.relative_to(ROOT)) for path in group]
        cmd = [*(prefix or []), sys.executable, "-m", "pytest", *without_nbval(), *paths, *extra]
        name = group[0].name if len(group) == 1 else f"{len(group)} light files"
        waits = len(group) == 1 and group[0].name in WAITING
        todo.append(Job(name, cmd, {**os.environ, "TMPDIR": str(tmpdir)}, base / f"unit{i}.log", waits))
    try:
        run_jobs(todo, jobs, finished, may_add=IdleMeter() if adapt else None)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    # where the unit pass's time goes, for whoever wants `make test` shorter
    print(f"\nunit pass: {sum(c for c, _, _ in cpus):.0f} s of CPU; the pytest processes, most CPU first:")
    for cpu, seconds, name in sorted(cpus, reverse=True):
        print(f"  {cpu:6.0f} s CPU {seconds:6.0f} s wall  {name}")
    return worst


def run(passes: list[Pass], prefix: list[str] | None, extra: list[str]) -> int:
    """Start every pass (all at once when `prefix` isolates them, else one by one); return the exit code."""
    base = Path(tempfile.mkdtemp(prefix="passes-"))
    results: list[tuple[Pass, int, float, float, dict[str, int]]] = []
    print(f"passes: {len(passes)} pass(es), " + ("side by side" if prefix else "one after another"), flush=True)
    by_name = {p.name: p for p in passes}

    def finished(job: Job, code: int, seconds: float, cpu: float) -> None:
        text = job.log.read_text(errors="replace")
        print(f"\n{'=' * 30} pass '{job.name}': exit {code} after {seconds / 60:.1f} min {'=' * 30}", flush=True)
        sys.stdout.write(text)
        sys.stdout.flush()
        results.append((by_name[job.name], code, seconds, cpu, _counts(text)))

    todo = []
    for i, p in enumerate(passes):
        tmpdir = base / f"tmp{i}"
        tmpdir.mkdir()
        cmd = [*(prefix or []), sys.executable, *p.args, *extra]
        todo.append(Job(p.name, cmd, _env_for(p, str(tmpdir)), base / f"pass{i}.log"))
    t_all = time.monotonic()
    try:
        run_jobs(todo, len(todo) if prefix else 1, finished, announce=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return _report(results, time.monotonic() - t_all)


def _report(results: list[tuple[Pass, int, float, float, dict[str, int]]], seconds: float) -> int:
    print(f"\n{'=' * 30} summary of {len(results)} pass(es), {seconds / 60:.1f} min in all {'=' * 30}")
    total: dict[str, int] = {}
    worst = 0
    for p, code, secs, cpu, counts in results:
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
        shown = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no test summary"
        timing = f"{secs / 60:5.1f} min  {cpu:5.0f} s CPU"
        print(f"  {'ok  ' if code == 0 else 'FAIL'}  {timing}  {p.name}: {shown} (exit {code})")
        worst = worst or code
    failed = total.get("failed", 0) + total.get("error", 0) + total.get("errors", 0)
    print(f"{total.get('passed', 0)} passed, {failed} failed")
    return worst


def _busy_loops(n: int) -> list[subprocess.Popen[bytes]]:
    code = "while True:\n    pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--under-load", action="store_true", help="run the notebooks with a busy loop per core")
    parser.add_argument("--serial", action="store_true", help="run the passes one after another")
    parser.add_argument("--unit-files", action="store_true", help=argparse.SUPPRESS)  # the unit-test pass
    parser.add_argument("--jobs", type=int, default=2, help=argparse.SUPPRESS)  # unit-test files at a time
    parser.add_argument("--adapt", action="store_true", help=argparse.SUPPRESS)  # beyond one, as cores idle
    parser.add_argument("pytest_args", nargs="*", help="extra arguments for every pytest run")
    args = parser.parse_args(argv)
    if args.unit_files:
        return run_unit_files(args.pytest_args, args.jobs, adapt=args.adapt)
    if args.under_load:
        sys.path.insert(0, str(ROOT))
        from helpers.environment import usable_cores

        cores = usable_cores()
        print(f"passes: a busy loop on each of the {cores} usable cores for the whole run", flush=True)
        loops = _busy_loops(cores)
        try:
            return run([Pass("notebooks under load", ["-m", "pytest", "--nbval", "notebooks"])], None, args.pytest_args)
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()
    # Each notebook's main path against its budget (issue 38; tests/test_main_path.py fails above it).
    subprocess.run([sys.executable, "-m", "helpers.main_path"], cwd=ROOT, check=False)
    prefix = None if args.serial else private_shm_prefix()
    passes = default_passes()
    if any(STUDENT_CHECK in p.args for p in passes):
        build_learner_edition()
    return run(passes, prefix, args.pytest_args)


if __name__ == "__main__":
    sys.exit(main())
