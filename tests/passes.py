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
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

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
        # Each test file in a process of its own: a test that leaves multiprocessing's or torch's
        # process-wide state changed (seen: every later DataLoader batch lost) cannot break another file.
        Pass("unit tests, hygiene, lint (one process per file, two at a time)", [str(Path(__file__)), "--unit-files"]),
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


def run_unit_files(extra: list[str], jobs: int, files: list[Path] | None = None) -> int:
    """Run each tests/test_*.py in a pytest process of its own, `jobs` at a time; 1 if any failed.

    With more than one job, each file gets a /dev/shm and a temporary folder of its own (the hygiene
    check of one file must not see another's live files); the largest files start first, so that the
    last one to finish is a short one. Each file's output is shown whole when it ends."""
    files = sorted(files or (ROOT / "tests").glob("test_*.py"), key=lambda f: f.stat().st_size, reverse=True)
    prefix = private_shm_prefix() if jobs > 1 else None
    if prefix is None:
        jobs = 1
    base = Path(tempfile.mkdtemp(prefix="unit-", dir=os.environ.get("TMPDIR")))
    running: list[tuple[subprocess.Popen[bytes], Path]] = []
    worst = 0

    def finish(proc: subprocess.Popen[bytes], log: Path) -> None:
        nonlocal worst
        if proc.wait() not in (0, 5):  # 5: no test collected
            worst = 1
        sys.stdout.write(log.read_text(errors="replace"))
        sys.stdout.flush()

    try:
        for i, path in enumerate(files):
            while len(running) >= jobs:
                done = [entry for entry in running if entry[0].poll() is not None]
                for entry in done:
                    running.remove(entry)
                    finish(*entry)
                if not done:
                    time.sleep(0.2)
            tmpdir = base / f"tmp{i}"
            tmpdir.mkdir()
            log = base / f"{path.stem}.log"
            cmd = [*(prefix or []), sys.executable, "-m", "pytest", str(path.relative_to(ROOT)), *extra]
            with log.open("wb") as out:
                env = {**os.environ, "TMPDIR": str(tmpdir)}
                proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
            running.append((proc, log))
        for entry in running:
            finish(*entry)
        running.clear()
    finally:
        for proc, _ in running:
            proc.kill()
            proc.wait()
        shutil.rmtree(base, ignore_errors=True)
    return worst


def run(passes: list[Pass], prefix: list[str] | None, extra: list[str]) -> int:
    """Start every pass (all at once when `prefix` isolates them, else one by one); return the exit code."""
    base = Path(tempfile.mkdtemp(prefix="passes-"))
    started: list[tuple[Pass, subprocess.Popen[bytes], Path, float]] = []
    results: list[tuple[Pass, int, float, dict[str, int]]] = []
    print(f"passes: {len(passes)} pass(es), " + ("side by side" if prefix else "one after another"), flush=True)

    def start(i: int, p: Pass) -> None:
        log = base / f"pass{i}.log"
        tmpdir = base / f"tmp{i}"
        tmpdir.mkdir()
        cmd = [*(prefix or []), sys.executable, *p.args, *extra]
        out = log.open("wb")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=_env_for(p, str(tmpdir)), stdout=out, stderr=subprocess.STDOUT)
        out.close()
        started.append((p, proc, log, time.monotonic()))
        print(f"passes: started '{p.name}'", flush=True)

    def finish(entry: tuple[Pass, subprocess.Popen[bytes], Path, float]) -> None:
        p, proc, log, t0 = entry
        code = proc.wait()
        seconds = time.monotonic() - t0
        text = log.read_text(errors="replace")
        print(f"\n{'=' * 30} pass '{p.name}': exit {code} after {seconds / 60:.1f} min {'=' * 30}", flush=True)
        sys.stdout.write(text)
        sys.stdout.flush()
        results.append((p, code, seconds, _counts(text)))

    t_all = time.monotonic()
    try:
        if prefix:
            for i, p in enumerate(passes):
                start(i, p)
            pending = list(started)
            last_note = time.monotonic()
            while pending:
                for entry in list(pending):
                    if entry[1].poll() is not None:
                        pending.remove(entry)
                        finish(entry)
                if pending and time.monotonic() - last_note > 60:
                    names = ", ".join(f"'{e[0].name}'" for e in pending)
                    print(f"passes: still running after {(time.monotonic() - t_all) / 60:.0f} min: {names}", flush=True)
                    last_note = time.monotonic()
                time.sleep(0.5)
        else:
            for i, p in enumerate(passes):
                start(i, p)
                finish(started[-1])
    finally:
        for _, proc, _, _ in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(base, ignore_errors=True)
    return _report(results, time.monotonic() - t_all)


def _report(results: list[tuple[Pass, int, float, dict[str, int]]], seconds: float) -> int:
    print(f"\n{'=' * 30} summary of {len(results)} pass(es), {seconds / 60:.1f} min in all {'=' * 30}")
    total: dict[str, int] = {}
    worst = 0
    for p, code, secs, counts in results:
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
        shown = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no test summary"
        print(f"  {'ok  ' if code == 0 else 'FAIL'}  {secs / 60:5.1f} min  {p.name}: {shown} (exit {code})")
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
    parser.add_argument("pytest_args", nargs="*", help="extra arguments for every pytest run")
    args = parser.parse_args(argv)
    if args.unit_files:
        return run_unit_files(args.pytest_args, args.jobs)
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
    prefix = None if args.serial else private_shm_prefix()
    passes = default_passes()
    if any(STUDENT_CHECK in p.args for p in passes):
        build_learner_edition()
    return run(passes, prefix, args.pytest_args)


if __name__ == "__main__":
    sys.exit(main())
