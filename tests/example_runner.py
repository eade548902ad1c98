"""Run a chapter's copyable script (examples/) as a learner would, for the tests of every chapter.

The script runs in a session of its own and a temporary folder of its own, with its output going to a
file rather than a pipe: a process it left behind (a DataLoader worker that outlived its parent) would
otherwise hold the pipe open and turn "left a process behind" into a time-out with no explanation.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _session(process: psutil.Process) -> int | None:
    try:
        return os.getsid(process.pid)
    except OSError:
        return None


def run_example(name: str, *args: str, timeout: float = 300.0) -> str:
    """`python examples/<name> <args>`; its standard output, after checking that it exited 0 within `timeout` s and
    left no process and no file behind."""
    script = EXAMPLES / name
    if not script.is_file():
        raise ValueError(f"name must be a script in {EXAMPLES}, got {name!r}")
    with (
        tempfile.TemporaryDirectory(prefix="example-") as tmp,
        tempfile.TemporaryFile("w+") as log,
        tempfile.TemporaryFile("w+") as errors,
    ):
        env = {**os.environ, "TMPDIR": tmp}
        proc = subprocess.Popen(
            [sys.executable, str(script), *args], stdout=log, stderr=errors, text=True, env=env,
            start_new_session=True, cwd=tmp,
        )  # fmt: skip
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            log.seek(0)
            errors.seek(0)
            raise AssertionError(
                f"{name} did not finish in {timeout:g} s; its output:\n{log.read()[-2000:]}\n{errors.read()[-2000:]}"
            ) from None
        # multiprocessing's resource tracker notices its parent's exit on its own, a moment later
        left = [p for p in psutil.process_iter() if _session(p) == proc.pid]
        _, alive = psutil.wait_procs(left, timeout=10)
        for process in alive:
            process.kill()
        log.seek(0)
        errors.seek(0)
        out, err = log.read(), errors.read()
        assert alive == [], f"{name} left processes behind: {[p.cmdline() for p in alive]}\n{out[-2000:]}"
        assert list(Path(tmp).iterdir()) == [], f"{name} left files behind in its temporary folder"
    assert proc.returncode == 0, out + err
    return out
