"""`python -m helpers.diagnose`: each pattern on a small script that really hangs or dies.

Deadlines: the pure-Python scripts reach their hang in well under a second, so 2 s is enough. The
torch scripts first import torch, which takes seconds on a busy machine; their deadline is a multiple
of this machine's measured import time, so that a loaded machine does not kill them before they hang.
The suite's conftest checks that nothing is left running and nothing new is left in /dev/shm.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "diagnose_scripts"
ROOT = Path(__file__).resolve().parent.parent


def diagnose(*args: str, timeout: float = 2.0, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run the command on `args` (a script name and its arguments, or a whole command)."""
    command = [sys.executable, str(SCRIPTS / args[0]), *args[1:]] if args[0].endswith(".py") else list(args)
    return subprocess.run(
        [sys.executable, "-m", "helpers.diagnose", "--timeout", str(timeout), *extra, "--", *command],
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


@functools.lru_cache(maxsize=1)
def torch_import_seconds() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, timeout=120)
    return time.monotonic() - started


def torch_deadline(factor: float = 2.5) -> float:
    return round(factor * torch_import_seconds() + 2.0, 1)


def report(done: subprocess.CompletedProcess) -> str:
    """Our part of stderr: from the first `diagnose:` line on."""
    at = done.stderr.find("\ndiagnose: ")
    return done.stderr[at:] if at >= 0 else ""


def assert_cause(done: subprocess.CompletedProcess, cause: str, section: str) -> None:
    text = report(done)
    lines = text.splitlines()
    best = next((line for line in lines if line.startswith(("most likely cause:", "what happened:"))), "")
    assert cause in best, text
    read = next((line for line in lines if line.startswith("read:")), "")
    assert section in read, text
    assert "nothing left running" in text or "what happened:" in text, text


# ---- usage ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--"],
        ["--timeout", "-1", "--", "true"],
        ["--timeout", "soon", "--", "true"],
        ["--timeout"],
        ["--", "no-such-command-here"],
        ["--timeout", "nan", "--", "true"],
        ["--bogus", "--", "true"],
    ],
)
def test_bad_usage_is_one_line_and_exit_code_2(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "helpers.diagnose", *args], capture_output=True, text=True, timeout=30, cwd=ROOT
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("diagnose: error: "), done.stderr


# ---- finishing in time ----------------------------------------------------------------------------


def test_a_script_that_finishes_is_passed_through_untouched() -> None:
    done = diagnose("finishes.py", "0", timeout=30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "results: [0, 1, 4, 9]\n", "to stderr\n")


def test_an_exit_code_is_returned_and_explained() -> None:
    done = diagnose("finishes.py", "3", timeout=30)
    assert done.returncode == 3
    assert done.stdout == "results: [0, 1, 4, 9]\n"
    assert done.stderr.startswith("to stderr\n")
    assert "exited with code 3" in report(done)


# ---- hangs ----------------------------------------------------------------------------------------


def test_join_before_drain() -> None:
    done = diagnose("join_before_drain.py")
    assert done.returncode == 124
    assert_cause(done, "join before drain", "06_deadlocks_and_pitfalls, section 4")
    assert "Queue._feed" in report(done) and "BaseProcess.join" in report(done)


@pytest.mark.skipif("forkserver" not in mp.get_all_start_methods(), reason="no forkserver here")
def test_join_before_drain_under_forkserver() -> None:
    """Under forkserver the producer is the server's child, not the joining process's."""
    done = diagnose("join_before_drain.py", "forkserver", timeout=4.0)
    assert_cause(done, "join before drain", "06_deadlocks_and_pitfalls, section 4")


def test_dead_producer() -> None:
    done = diagnose("dead_producer.py")
    assert_cause(done, "dead (or missing) producer", "06_deadlocks_and_pitfalls, section 4")
    assert "ValueError: bad record 1" in report(done)


def test_lock_held_at_fork() -> None:
    done = diagnose("lock_at_fork.py")
    assert_cause(done, "a lock held at fork", "06_deadlocks_and_pitfalls, section 1")
    assert "child (lock_at_fork.py:17)" in report(done)


def test_missing_main_guard_from_stderr_and_churn() -> None:
    done = diagnose("pool_no_guard.py", timeout=3.0)
    assert_cause(done, "a missing main guard", "06_deadlocks_and_pitfalls, section 3")
    assert "bootstrapping phase" in report(done)
    assert "resource tracker" in report(done)


def test_a_pool_worker_killed_mid_task() -> None:
    done = diagnose("killed_pool_worker.py", timeout=3.0)
    assert_cause(done, "a pool worker died in the middle of a task", "04_pool_vs_process, section 6")
    assert "vanished during the run" in report(done)


def test_an_unknown_hang_is_reported_as_unknown_with_its_stacks() -> None:
    done = diagnose("unknown.py", timeout=1.5)
    text = report(done)
    assert done.returncode == 124
    assert "most likely cause: unknown" in text
    assert "<module> (unknown.py:5)" in text


def test_faulthandler_fallback_without_py_spy() -> None:
    done = diagnose("join_before_drain.py", extra=("--no-py-spy",))
    assert_cause(done, "join before drain", "06_deadlocks_and_pitfalls, section 4")
    assert "py-spy not used" in report(done) and "from faulthandler" in report(done)


def test_fork_after_openmp_shows_libgomp_frames() -> None:
    done = diagnose("openmp_fork.py", timeout=torch_deadline())
    assert_cause(done, "fork after OpenMP", "06_deadlocks_and_pitfalls, section 1")
    assert "libgomp" in report(done)


def test_waiting_in_a_collective_names_the_missing_rank() -> None:
    done = diagnose("collective.py", timeout=torch_deadline(3.0))
    assert_cause(done, "rank(s) 0 wait in barrier() for rank(s) 1", "05_ddp, section 9")


def test_waiting_for_a_rendezvous() -> None:
    done = diagnose("store_wait.py", timeout=torch_deadline())
    assert_cause(done, "waiting for a store or rendezvous", "06_deadlocks_and_pitfalls, section 6")


# ---- deaths ---------------------------------------------------------------------------------------


def test_sigkill_is_explained_as_the_oom_killer() -> None:
    done = diagnose("killed_worker.py", timeout=30)
    assert done.returncode == 128 + 9
    assert done.stdout == "allocating\n"
    assert_cause(done, "died of SIGKILL", "06_deadlocks_and_pitfalls")
    assert "out-of-memory killer" in report(done)


def test_a_worker_traceback_names_the_worker() -> None:
    done = diagnose("worker_error.py", timeout=60)
    assert done.returncode == 1
    assert_cause(done, "a DataLoader worker raised", "01_dataloader_workers, section 8")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_full_dev_shm() -> None:
    """In a private 64 MB /dev/shm (a user and mount namespace of its own, as notebook 06 does)."""
    inner = [
        sys.executable,
        "-m",
        "helpers.diagnose",
        "--timeout",
        "60",
        "--",
        sys.executable,
        str(SCRIPTS / "shm_full.py"),
    ]
    shell = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"'
    done = subprocess.run(
        ["unshare", "-Urm", "sh", "-c", shell, "sh", *inner],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    if "mount" in done.stderr[:200] or "unshare" in done.stderr[:200]:
        pytest.skip(f"no private /dev/shm here: {done.stderr.strip()[:120]}")
    assert done.returncode == 1
    assert_cause(done, "a full /dev/shm", "06_deadlocks_and_pitfalls, section 7")
