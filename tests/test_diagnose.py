"""`python -m helpers.diagnose`: each pattern on a small script that really hangs or dies.

Deadlines: the pure-Python scripts reach their hang in well under a second, so 2 s is enough. The
torch scripts first import torch, which takes seconds on a busy machine; their deadline is a multiple
of this machine's import time as busy as it is when the test starts (tests/machine_speed.py), so that a
loaded machine does not kill them before they hang.
The suite's conftest checks that nothing is left running and nothing new is left in /dev/shm.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import machine_speed
import pytest

from helpers.diagnose import deaths, patterns
from helpers.diagnose.patterns import Facts
from helpers.diagnose.stacks import Ended, Frame, Proc, Thread
from helpers.diagnose.tree import Seen

SCRIPTS = Path(__file__).parent / "diagnose_scripts"
ROOT = Path(__file__).resolve().parent.parent


def diagnose(
    *args: str, timeout: float = 2.0, extra: tuple[str, ...] = (), env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the command on `args` (a script name, or a script's absolute path, and its arguments, or a whole
    command); `env`: variables added to this environment."""
    command = [sys.executable, str(SCRIPTS / args[0]), *args[1:]] if args[0].endswith(".py") else list(args)
    return subprocess.run(
        [sys.executable, "-m", "helpers.diagnose", "--timeout", str(timeout), *extra, "--", *command],
        capture_output=True,
        text=True,
        timeout=timeout + 60,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env} if env else None,
    )


def torch_deadline(factor: float = 2.5) -> float:
    return machine_speed.torch_deadline(factor)


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
    assert "flight recorder" not in report(done)  # no process group: no line about one


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
    assert_cause(done, "a pool worker died mid-task (killed by SIGKILL)", "04_pool_vs_process, section 6")
    assert "as their parent reaped them" in report(done)


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
    assert "flight recorder" not in report(done)  # torch, but no process group


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
    assert_cause(
        done,
        "DataLoader worker 0 raised KeyError: 3 in __getitem__ (worker_error.py:12)",
        "notebooks/01_dataloader_workers.ipynb#8.",
    )
    assert "flight recorder" not in report(done)


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


# ---- the command's interpreter --------------------------------------------------------------------


def _system_python_without_torch() -> str | None:
    for candidate in ("/usr/bin/python3", "/bin/python3"):
        if Path(candidate).exists() and Path(candidate).resolve() != Path(sys.executable).resolve():
            probe = subprocess.run([candidate, "-c", "import torch"], capture_output=True, timeout=60)
            if probe.returncode != 0:
                return candidate
    return None


def test_a_python_on_path_without_torch_is_named_with_the_courses_interpreter(tmp_path: Path) -> None:
    """`python -m helpers.diagnose -- python script.py` where the inner `python` is a system one."""
    system = _system_python_without_torch()
    if system is None:
        pytest.skip("no system python without torch here")
    (tmp_path / "python").symlink_to(system)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "helpers.diagnose",
            "--timeout",
            "30",
            "--",
            "python",
            str(SCRIPTS / "imports_torch.py"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    text = report(done)
    assert done.returncode == 1
    assert "what happened: the command's interpreter cannot import torch" in text, text
    assert sys.executable in text and "DataLoader" not in text and "num_workers" not in text, text


# ---- rules on made-up evidence (no processes: fast) -----------------------------------------------


def _proc(pid: int, frames: list[tuple[str, str, int]], *, ppid: int = 1, role: str = "", **kw) -> Proc:
    """A process whose main thread has `frames` (name, file, line), innermost first; a file without
    `.py` is native."""
    thread = Thread("MainThread", kw.pop("idle", True), [Frame(n, f, ln, not f.endswith(".py")) for n, f, ln in frames])
    proc = Proc(
        pid,
        ppid,
        ["python", "x.py"],
        "python",
        "sleeping",
        kw.pop("threads_count", 1),
        {},
        kw.pop("forked", True),
        False,
    )
    proc.threads, proc.role = [thread], role or "child process (fork)"
    for key, value in kw.items():
        setattr(proc, key, value)
    return proc


def test_a_lock_in_a_child_forked_from_one_thread_is_not_a_lock_held_at_fork(tmp_path: Path) -> None:
    script = tmp_path / "work.py"
    script.write_text("import threading\nlock = threading.Lock()\ndef work():\n    with lock:\n        pass\n")
    frames = [("PyThread_acquire_lock_timed", "libpython3.11.so", 0), ("work", str(script), 4)]
    forked_alone = _proc(11, frames, threads_at_fork=1)
    found = patterns.diagnose_hang(Facts([forked_alone], 10, "", {}))
    assert found and found[0].cause.startswith("a lock that nobody will release"), found
    assert not any("held at fork" in f.cause for f in found)
    with_threads = _proc(11, frames, threads_at_fork=3)
    assert patterns.diagnose_hang(Facts([with_threads], 10, "", {}))[0].cause.startswith("a lock held at fork")


def test_ranks_in_different_collectives_are_named_one_by_one() -> None:
    c10d = "/x/site-packages/torch/distributed/distributed_c10d.py"
    rank0 = _proc(11, [("barrier", c10d, 1), ("run", "/u/train.py", 5)], rank=0, role="rank 0")
    rank1 = _proc(12, [("all_reduce", c10d, 2), ("run", "/u/train.py", 7)], rank=1, role="rank 1")
    cause = patterns.waiting_in_collective(Facts([rank0, rank1], 10, "", {})).cause
    assert cause.startswith("ranks out of step: rank 0 in barrier(), rank 1 in all_reduce()"), cause


def test_a_forked_child_in_another_librarys_thread_pool() -> None:
    for native, name in [
        ("rayon_core::latch::LockLatch::wait_and_reset", "tokenizers' Rust thread pool"),
        ("blas_thread_server", "OpenBLAS's thread pool"),
    ]:
        child = _proc(11, [("syscall", "libc.so.6", 0), (native, "lib.so", 0), ("encode", "/u/x.py", 3)])
        found = patterns.fork_after_thread_pool(Facts([child], 10, "", {}))
        assert found is not None and name in found.cause, (native, found)
        not_forked = _proc(11, [(native, "lib.so", 0)], forked=False)
        assert patterns.fork_after_thread_pool(Facts([not_forked], 10, "", {})) is None


def test_busy_is_slow_not_hung_and_idle_is_not() -> None:
    busy = _proc(10, [("<module>", "/u/x.py", 3)], idle=False, forked=False, role="main process", cpu=0.97)
    assert patterns.diagnose_hang(Facts([busy], 10, "", {}))[0].cause.startswith("probably slow, not hung")
    idle = _proc(10, [("<module>", "/u/x.py", 3)], forked=False, role="main process", cpu=0.0)
    assert patterns.diagnose_hang(Facts([idle], 10, "", {})) == []
    # on a loaded machine the half-second sample can catch a running script between time slices (seen in
    # make test: 0 %); its share over its life still says it runs, while a waiting one stays idle
    between_slices = _proc(10, [("<module>", "/u/x.py", 3)], idle=False, forked=False, role="main process", cpu=0.02)
    between_slices.cpu_life = 0.35
    found = patterns.diagnose_hang(Facts([between_slices], 10, "", {}))
    assert found and found[0].cause.startswith("probably slow, not hung")
    assert "35 % over its life" in found[0].evidence[0]
    between_slices.cpu_life = 0.04
    assert patterns.diagnose_hang(Facts([between_slices], 10, "", {})) == []
    waited = _proc(10, [("<module>", "/u/x.py", 3)], forked=False, role="main process", cpu=0.0, cpu_life=0.9)
    assert patterns.diagnose_hang(Facts([waited], 10, "", {})) == []  # worked, then waits: not "slow"


def test_a_pool_worker_reaped_with_an_exit_code_is_a_death_mid_task() -> None:
    pool = "/py/lib/python3.11/multiprocessing/pool.py"
    main = _proc(10, [("ApplyResult.get", pool, 768), ("Pool.map", pool, 367)], forked=False, role="main process")
    worker = _proc(12, [("worker", pool, 114)], ppid=10, role="pool worker")
    ended = {11: Ended(11, 10, 123, 0.0)}
    found = patterns.killed_pool_worker(Facts([main, worker], 10, "", {}, ended=ended))
    assert found is not None and found.cause.startswith("a pool worker died mid-task (exit code 123)"), found


_SPAWN_ERROR = """Traceback (most recent call last):
torch.multiprocessing.spawn.ProcessRaisedException:
-- Process 1 terminated with the following error:
Traceback (most recent call last):
  File "/x/site-packages/torch/multiprocessing/spawn.py", line 87, in _wrap
    fn(i, *args)
  File "/u/train.py", line 16, in main_worker
    dist.all_reduce(t)
  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
    work.wait()
RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:31408
"""


@pytest.mark.parametrize("peer_exit", [0, None])
def test_a_ranks_error_names_the_rank_and_a_peer_that_left_early(peer_exit: int | None) -> None:
    ended = {21: Ended(21, 10, peer_exit, 0.0)} if peer_exit is not None else {}
    found = deaths.diagnose_death(1, Facts([], 10, _SPAWN_ERROR, {}, ended=ended), {})
    if peer_exit == 0:
        assert found.cause.startswith("rank 1 failed in all_reduce() with gloo's"), found.cause
        assert "Join" in found.fix
    else:
        assert found.cause.startswith("rank 1 raised RuntimeError"), found.cause
        assert "in main_worker (train.py:16)" in found.cause
    assert "main process (pid 10) exited" not in found.cause


@pytest.mark.parametrize(
    ("stderr", "cause"),
    [
        ("RuntimeError: received 0 items of ancdata\n", "too many open files"),
        ("AttributeError: Can't pickle local object 'main.<locals>.f'\n", "a function that cannot be pickled"),
        (
            "RuntimeError:\n        An attempt has been made to start a new process before the\n        current "
            "process has finished its bootstrapping phase.\nRuntimeError: DataLoader worker (pid(s) 5) exited "
            "unexpectedly\n",
            "a missing main guard: a spawn child of the DataLoader",
        ),
        ("RuntimeError: unable to write to file </torch_5_1_0>: No space left on device (28)\n", "a full /dev/shm"),
    ],
)
def test_deaths_the_course_explains(stderr: str, cause: str) -> None:
    found = deaths.diagnose_death(1, Facts([], 10, "Traceback (most recent call last):\n" + stderr, {}), {})
    assert cause in found.cause, found.cause


def test_diagnose_itself_run_by_a_python_without_its_packages_says_which_to_use() -> None:
    system = _system_python_without_torch()
    if system is None or subprocess.run([system, "-c", "import psutil"], capture_output=True).returncode == 0:
        pytest.skip("no system python without psutil here")
    done = subprocess.run(
        [system, "-m", "helpers.diagnose", "--", "python", "x.py"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("diagnose: error: this interpreter"), done.stderr
    assert str(ROOT / ".venv" / "bin" / "python") in done.stderr or "course's environment" in done.stderr


def test_a_torchrun_ranks_traceback_names_the_rank_not_the_main_process() -> None:
    stderr = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/u/train.py", line 9, in main\n'
        "[rank1]:     check(batch)\n"
        "[rank1]: ValueError: bad batch\n"
    )
    found = deaths.diagnose_death(1, Facts([], 10, stderr, {}, command=["torchrun", "train.py"]), {})
    assert found.cause.startswith("rank 1 raised ValueError: bad batch in main (train.py:9); the launcher"), found.cause


def test_the_same_lock_name_on_two_objects_is_not_a_lock_taken_twice(tmp_path: Path) -> None:
    script = tmp_path / "nested.py"
    script.write_text(
        "class Node:\n    def visit(self):\n        with self.lock:\n            return self.child.visit()\n"
    )
    native = ("PyThread_acquire_lock_timed", "libpython3.11.so", 0)
    frames = [native, ("Node.visit", str(script), 3), ("Node.visit", str(script), 4)]
    proc = _proc(11, frames, forked=False, role="main process", threads_at_fork=None)
    inner, outer = proc.threads[0].frames[1:]
    inner.locals, outer.locals = {"self": "<Node at 0x1>"}, {"self": "<Node at 0x2>"}
    assert patterns.lock_taken_twice(Facts([proc], 11, "", {})) is None
    outer.locals = {"self": "<Node at 0x1>"}
    found = patterns.lock_taken_twice(Facts([proc], 11, "", {}))
    assert found is not None and found.cause.startswith("a lock taken twice: pid 11"), found


# ---- issue 39: the first failure, found right, named from the catalogue ----------------------------

_TORCHRUN_SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-03_14:41:16
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 32007)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 32007
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_14:41:16
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 32008)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_point1_a_collective_of_different_sizes_gets_the_cross_rank_fix_not_a_generic_one() -> None:
    stderr = (
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'\n"
        "  what():  [enforce fail at /x/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 8 vs 4. "
        "Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?\n"
        "Traceback (most recent call last):\n"
        '  File "/u/job.py", line 16, in <module>\n'
        "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal SIGABRT\n"
    )
    found = deaths.diagnose_death(1, Facts([], 10, stderr, {}), {})
    assert found.cause.startswith("rank 0 raised gloo::EnforceNotMet"), found.cause
    assert "different sizes" in found.cause and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in found.fix
    assert "nprocs=1" not in found.fix and "num_workers=0" not in found.fix


def test_point1_address_in_use_names_the_holder_of_the_port() -> None:
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "/u/job.py", line 9, in <module>\n'
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29577, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use\n"
    )
    facts = Facts([], 10, stderr, {})
    facts.listening = {29577: {4242: "python other_job.py"}}
    found = deaths.diagnose_death(1, facts, {})
    assert "The store's port" in found.cause, found.cause
    assert "port 29577 is held now by pid 4242: python other_job.py" in found.evidence
    assert "06_deadlocks_and_pitfalls.ipynb#6." in found.section


def test_point1_an_error_nobody_knows_is_said_plainly_with_the_users_frame() -> None:
    stderr = 'Traceback (most recent call last):\n  File "/u/job.py", line 3, in <module>\nZeroDivisionError: no\n'
    found = deaths.diagnose_death(1, Facts([], 10, stderr, {}), {})
    assert "not a failure the course knows" in found.cause and "<module> (job.py:3)" in found.cause, found.cause
    assert found.fix.startswith("None from the course") and "num_workers=0" not in found.fix


def test_point2_children_that_died_while_the_parent_exited_0() -> None:
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        '  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 122, in spawn_main\n'
        '  File "/u/job.py", line 3, in <module>\n'
        "    mp.set_start_method('spawn')\n"
        "RuntimeError: context has already been set\n"
    )
    facts = Facts([], 10, stderr, {}, ended={21: Ended(21, 10, 1, 0.0)})
    found = deaths.children_failed(facts)
    assert found is not None and "exited with code 0, but" in found.cause, found
    assert "a spawn child, at start-up raised RuntimeError: context has already been set" in found.cause
    assert deaths.children_failed(Facts([], 10, "", {})) is None


def test_point3_torchrun_root_cause_not_the_first_rank_listed() -> None:
    stderr = "[rank1]: Traceback (most recent call last):\n[rank1]: ValueError: one\n" + _TORCHRUN_SUMMARY
    found = deaths.diagnose_death(1, Facts([], 10, stderr, {}), {})
    assert found.cause.startswith("rank 1 raised ValueError: one"), found.cause
    assert any("root cause (first observed failure) rank 1" in e and "rank 0 (SIGTERM)" in e for e in found.evidence)


def test_point3_a_usage_error_on_every_rank_is_the_failure() -> None:
    usage = "usage: train.py [-h] [--local_rank LOCAL_RANK]\ntrain.py: error: unrecognized arguments: --local-rank=0\n"
    summary = _TORCHRUN_SUMMARY.replace("exitcode  : 1 (pid: 32008)", "exitcode  : 2 (pid: 32008)")
    found = deaths.diagnose_death(1, Facts([], 10, usage + usage + summary, {}), {})
    assert found.cause.startswith("rank 1 raised train.py: error: unrecognized arguments: --local-rank=0"), found.cause
    assert "code 2" in found.cause and "LOCAL_RANK" in found.fix


def test_point4_ddp_forward_on_one_rank_is_a_collective() -> None:
    stderr = (
        "-- Process 0 terminated with the following error:\nTraceback (most recent call last):\n"
        '  File "/u/job.py", line 33, in run\n'
        '  File "/x/site-packages/torch/nn/parallel/distributed.py", line 1886, in forward\n'
        '  File "/x/site-packages/torch/nn/parallel/distributed.py", line 1782, in _pre_forward\n'
        "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:1. gloo\n"
    )
    found = deaths.diagnose_death(1, Facts([], 10, stderr, {}, ended={21: Ended(21, 10, 0, 0.0)}), {})
    assert "DDP's forward is a collective" in found.cause and "model.module" in found.cause, found.cause


def test_point5_the_other_rank_that_failed_on_its_own_is_not_said_to_be_ended() -> None:
    stderr = (
        "-- Process 1 terminated with the following error:\nTraceback (most recent call last):\n"
        '  File "/u/job.py", line 23, in run\n'
        "RuntimeError: ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (5), got (4))\n"
    )
    seen = {21: Seen(21, 10, [], 1.0), 22: Seen(22, 10, [], 1.1)}
    facts = Facts([], 10, stderr, seen, ended={21: Ended(21, 10, 1, 2.0), 22: Ended(22, 10, 1, 2.1)})
    found = deaths.diagnose_death(1, facts, {})
    assert found.cause.startswith("rank 1 raised RuntimeError: ProcessGroupGloo::allgather"), found.cause
    assert any(e.startswith("rank 0 (pid 21, by start order) failed too, on its own") for e in found.evidence)


def test_point6_the_whole_message_is_quoted() -> None:
    tail = "pass find_unused_parameters=True " * 20 + "THE END"
    stderr = (
        "-- Process 1 terminated with the following error:\nTraceback (most recent call last):\n"
        '  File "/u/job.py", line 5, in run\n'
        f"RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. {tail}\n"
    )
    found = deaths.diagnose_death(1, Facts([], 10, stderr, {}), {})
    assert any(e.endswith("THE END   [in run (job.py:5)]   [catalogue: ddp-unused-parameters]") for e in found.evidence)


def test_point7_a_tensor_whose_sender_exited() -> None:
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "/u/job.py", line 27, in <module>\n'
        '  File "/x/site-packages/torch/multiprocessing/reductions.py", line 557, in rebuild_storage_fd\n'
        '  File "/usr/lib/python3.11/multiprocessing/resource_sharer.py", line 86, in get_connection\n'
        "FileNotFoundError: [Errno 2] No such file or directory\n"
    )
    found = deaths.diagnose_death(1, Facts([], 10, stderr, {}), {})
    assert "the sender had exited" in found.cause and "alive" in found.fix, found.cause


def test_point8_a_pool_workers_exception_is_the_workers() -> None:
    stderr = (
        'multiprocessing.pool.RemoteTraceback: \n"""\nTraceback (most recent call last):\n'
        '  File "/usr/lib/python3.11/multiprocessing/pool.py", line 125, in worker\n'
        '  File "/u/job.py", line 18, in predict\n'
        "KeyError: 838\n"
        '"""\n\nThe above exception was the direct cause of the following exception:\n\n'
        'Traceback (most recent call last):\n  File "/u/job.py", line 23, in <module>\nKeyError: 838\n'
    )
    found = deaths.diagnose_death(1, Facts([], 10, stderr, {}), {})
    assert found.cause.startswith("a Pool worker raised KeyError: 838 in predict (job.py:18)"), found.cause
    assert "the main process raised" not in found.cause


def test_a_failure_seen_in_a_hang_does_not_claim_the_command_ended() -> None:
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/multiprocessing/queues.py", line 244, in _feed\n'
        "RuntimeError: Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd does not "
        "support crossing process boundaries.\n"
    )
    found = deaths.from_failures(0, Facts([], 10, stderr, {}), hung=True)
    assert found is not None and "while the command still ran" in found.cause, found
    assert "exited" not in found.cause and "detach" in found.fix


# ---- the Flight Recorder: the first collective where the ranks differ ----------------------------

DESYNC = """
import datetime, socket, sys, time
import torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, port, mode):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(minutes=30))
    for _ in range(3):
        dist.all_reduce(torch.ones(8))
    if rank == 1 and mode == "stuck":
        time.sleep(1_800)  # rank 1 never reaches the 4th collective
    if rank == 1 and mode == "op":
        dist.broadcast(torch.zeros(2), src=0)  # the desync: rank 0 all-reduces 8 numbers, rank 1 broadcasts 2
    else:
        dist.all_reduce(torch.ones(8))

if __name__ == "__main__":
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    mp.start_processes(run, args=(port, sys.argv[1]), nprocs=2, start_method="fork")
"""


def test_no_script_ends_its_own_hang_before_the_deadline() -> None:
    # the deadline grows with the machine's load (machine_speed.torch_deadline): a 60-s timeout fired first once
    for script in sorted(SCRIPTS.glob("*.py")):
        assert not machine_speed.too_short_for_a_hang(script.read_text()), script.name
    assert not machine_speed.too_short_for_a_hang(DESYNC)


def _flight(done: subprocess.CompletedProcess) -> list[str]:
    """The report's Flight Recorder line and the rows under it."""
    lines = report(done).splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("flight recorder:")), None)
    if at is None:
        return []
    rows = [lines[at]]
    for line in lines[at + 1 :]:
        if not line.startswith("  "):
            break
        rows.append(line)
    return rows


@pytest.fixture
def desync(tmp_path: Path) -> Path:
    path = tmp_path / "desync.py"
    path.write_text(DESYNC)
    return path


def test_the_flight_recorder_names_the_first_collective_where_the_ranks_differ(desync: Path) -> None:
    done = diagnose(str(desync), "op", timeout=torch_deadline())
    assert done.returncode == 124, done.stderr
    flight = _flight(done)
    assert flight, report(done)
    assert flight[0] == (
        "flight recorder: the ranks first differ at collective #4 of group 0 (default_pg): "
        "rank 0 called all_reduce of [[8]]; rank 1 called broadcast of [[2]]"
    ), report(done)
    table = "\n".join(flight)
    assert re.search(r"4 +all_reduce \[\[8\]\] +broadcast \[\[2\]\] +False", table), table
    assert re.search(r"3 +all_reduce \[\[8\]\] +all_reduce \[\[8\]\] +True", table), table
    assert "07_ddp_in_practice, section 7" in table
    assert_cause(done, "ranks out of step: rank 0 in all_reduce(), rank 1 in broadcast()", "05_ddp, section 9")
    assert "_fr_listen" not in report(done) and "diagnose-flight-recorder" not in report(done)  # our thread


def test_the_flight_recorder_names_a_rank_that_never_reached_a_collective(desync: Path) -> None:
    done = diagnose(str(desync), "stuck", timeout=torch_deadline())
    flight = _flight(done)
    assert flight and flight[0] == (
        "flight recorder: rank 1 never reached collective #4 of group 0 (default_pg), where rank 0 called "
        "all_reduce of [[8]] (rank 1's last was #3)"
    ), report(done)
    assert re.search(r"4 +all_reduce \[\[8\]\] +\(never reached\) +False", "\n".join(flight)), flight


def test_with_the_flight_recorder_off_the_verdict_still_comes_with_one_line_saying_so(desync: Path) -> None:
    done = diagnose(str(desync), "op", timeout=torch_deadline(), env={"TORCH_FR_BUFFER_SIZE": "0"})
    assert _flight(done) == ["flight recorder: no collective recorded (TORCH_FR_BUFFER_SIZE=0 turns it off)"], report(
        done
    )
    assert_cause(done, "ranks out of step: rank 0 in all_reduce(), rank 1 in broadcast()", "05_ddp, section 9")


def _entry(seq: int, op: str, sizes: list, group: str = "0", created: int = 0) -> dict:
    desc = "default_pg" if group == "0" else "undefined"
    return {
        "collective_seq_id": seq,
        "profiling_name": f"gloo:{op}",
        "input_sizes": sizes,
        "process_group": (group, desc),
        "is_p2p": False,
        "time_created_ns": created or seq,
    }


def test_first_difference_reads_operations_sizes_absent_ranks_and_ring_buffer_windows() -> None:
    from helpers.diagnose.collectives import first_difference

    same = [_entry(1, "all_reduce", [[8]]), _entry(2, "barrier", [])]
    assert first_difference({0: same, 1: list(same)}) is None
    sizes = first_difference({0: same, 1: [same[0], _entry(2, "barrier", [[1]])]})
    assert sizes is not None and sizes.seq == 2
    diff = first_difference({0: same + [_entry(3, "all_reduce", [[8]])], 1: same})
    assert diff is not None and diff.seq == 3 and diff.calls[1] is None and diff.last[1] == 2
    # rank 0's buffer kept only #3..#6: the comparison starts where both ranks still have records
    late = [_entry(i, "all_reduce", [[8]]) for i in range(3, 7)]
    early = [_entry(i, "all_reduce", [[8]]) for i in range(1, 6)] + [_entry(6, "broadcast", [[2]])]
    diff = first_difference({0: late, 1: early})
    assert diff is not None and diff.seq == 6
    # a rank that called nothing in the default group never reached its first collective
    diff = first_difference({0: same, 1: []})
    assert diff is not None and diff.seq == 1 and diff.calls[1] is None
    # a side group's difference, found though the default group agrees
    side = {0: same + [_entry(1, "all_reduce", [[3]], "1", 9)], 1: same + [_entry(1, "broadcast", [[3]], "1", 9)]}
    diff = first_difference(side)
    assert diff is not None and diff.group == "group 1" and diff.seq == 1


def _ready(folder: Path, pid: int, rank: int) -> None:
    (folder / f"fr-ready-{pid}.txt").write_text(f"{pid} {rank}\n")


def test_the_flight_recorder_verdict_says_why_there_are_no_records(tmp_path: Path) -> None:
    import pickle

    from helpers.diagnose.collectives import verdict

    assert verdict(tmp_path) == []  # no process made a group: no line at all
    _ready(tmp_path, 100, 0)
    (tmp_path / "fr-100-rank0.pkl").write_bytes(pickle.dumps({"entries": [_entry(1, "broadcast", [[25]])]}))
    assert verdict(tmp_path) == [
        "flight recorder: only rank 0 made a process group, nothing to compare: its last collective was #1, "
        "broadcast of [[25]]"
    ]
    for path in tmp_path.iterdir():
        path.unlink()
    _ready(tmp_path, 101, 0)
    _ready(tmp_path, 102, 1)
    assert verdict(tmp_path) == [
        "flight recorder: unavailable: no rank wrote its records (each ended before it could, or none answered in time)"
    ]
    (tmp_path / "fr-101.err").write_text("AttributeError: module has no attribute '_dump_fr_trace'\n")
    assert verdict(tmp_path) == [
        "flight recorder: unavailable: AttributeError: module has no attribute '_dump_fr_trace'"
    ]
    (tmp_path / "fr-101-rank0.pkl").write_bytes(pickle.dumps({"entries": [_entry(1, "all_reduce", [[8]])]}))
    assert verdict(tmp_path) == [
        "flight recorder: records from rank 0 only: its last collective was #1, all_reduce of [[8]]; "
        "no record from rank(s) 1 (ended before writing one, or did not answer in time)"
    ]
    (tmp_path / "fr-102-rank1.pkl").write_bytes(pickle.dumps({"entries": [_entry(1, "all_reduce", [[8]])]}))
    assert verdict(tmp_path) == [
        "flight recorder: the ranks' records agree (collectives recorded: rank 0: 1, rank 1: 1)"
    ]
    (tmp_path / "fr-102-rank1.pkl").write_bytes(b"not a pickle")
    assert verdict(tmp_path)[0].startswith("flight recorder: records from rank 0 only")


_SPAWN_CHILD_TB = """Traceback (most recent call last):
  File "<string>", line 1, in <module>
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 122, in spawn_main
    exitcode = _main(fd, parent_sentinel)
               ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 131, in _main
    prepare(preparation_data)
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 246, in prepare
    _fixup_main_from_path(data['init_main_from_path'])
  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 297, in _fixup_main_from_path
    main_content = runpy.run_path(main_path,
                   ^^^^^^^^^^^^^^^^^^^^^^^^^
  File "<frozen runpy>", line 291, in run_path
  File "<frozen runpy>", line 98, in _run_module_code
  File "<frozen runpy>", line 88, in _run_code
  File "/tmp/train.py", line 3, in <module>
    mp.set_start_method("spawn")
  File "/usr/lib/python3.11/multiprocessing/context.py", line 247, in set_start_method
    raise RuntimeError('context has already been set')
RuntimeError: context has already been set
"""


def test_two_spawn_childrens_tracebacks_interleaved_line_by_line_are_still_the_childrens() -> None:
    """Two children failing at once share one stderr pipe; the second may start at any line of the first."""
    from helpers.diagnose import failures

    lines = _SPAWN_CHILD_TB.splitlines(keepends=True)
    misread = []
    for ahead in range(len(lines) - 2):  # the second header lands after `ahead` lines of the first
        rest = lines[ahead:]
        pairs = "".join(a + b for a, b in zip(rest, lines, strict=False))
        mixed = "".join(lines[:ahead]) + pairs + "".join(lines[len(rest) :])
        found = [(f.who, f.entry.id if f.entry else None) for f in failures.find(mixed)]
        if ("a spawn child, at start-up", "context-already-set") not in found or any(
            who == "the main process" for who, _ in found
        ):
            misread.append((ahead, found))
    assert not misread


def test_diagnosed_processes_write_an_uncaught_traceback_in_one_write() -> None:
    """The cause of interleaving removed where it starts: one os.write per traceback, the same text as Python's."""
    site = ROOT / "helpers" / "diagnose_site" / "sitecustomize.py"
    body = """
import atexit, os
writes = []
real = os.write
def counting(fd, data):
    if fd == 2:
        writes.append(len(data))
    return real(fd, data)
os.write = counting
atexit.register(lambda: real(1, str(len(writes)).encode()))
def fail():
    raise ValueError("two\\nlines, one non-ASCII: \\u00e9")
fail()
"""
    arm = (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('diagnose_site', {str(site)!r})\n"
        "site = importlib.util.module_from_spec(spec); spec.loader.exec_module(site)\n"
        "site._whole_tracebacks()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "HELPERS_DIAGNOSE_DIR"}
    plain = subprocess.run([sys.executable, "-c", body], capture_output=True, env=env, timeout=60, check=False)
    armed = subprocess.run([sys.executable, "-c", arm + body], capture_output=True, env=env, timeout=60, check=False)
    assert armed.stdout == b"1" and plain.stdout != b"1"
    strip = re.compile(rb'  File "<string>", line \d+')  # the armed script is longer: its line numbers differ
    assert strip.sub(b"", armed.stderr) == strip.sub(b"", plain.stderr)
    assert b"ValueError: two\nlines" in armed.stderr
