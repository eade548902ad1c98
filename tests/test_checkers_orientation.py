"""Checkers of notebook 00: the unedited placeholder and the typical wrong answer get "Not yet" every time
(3 runs each: no wrong answer's verdict here depends on timing), the solution gets "Correct" every time
(20 runs), and bad input is refused clearly."""

import multiprocessing as mp
import subprocess
import sys

import pytest
import torch

from helpers import checks

RUNS = 20
RUNS_DETERMINISTIC = 3  # wrong answers whose verdict no timing, load or chance can change: 3 runs show it is stable


def verdicts(check, *args, runs=RUNS, **kwargs):
    """The distinct first words of `runs` verdicts: {"Correct:"} or {"Not yet:"} when the checker is stable."""
    return {repr(check(*args, **kwargs)).split(" ")[0] for _ in range(runs)}


def placeholder_threads_per_process(processes, cores):
    # your code here
    return None


@pytest.mark.parametrize(
    "fn",
    [
        placeholder_threads_per_process,
        lambda p, c: c // p,  # the typical wrong answer: 0 threads when processes > cores
        lambda p, c: c,  # oversubscribes
        lambda p, c: 1 / 0,
        lambda p, c: max(1.0, c / p),  # a float
        lambda p, c: max(1, round(c / p)),  # rounds 8 / 3 up to 3: 9 threads on 8 cores
        lambda p, c: max(1, -(-c // p)),  # the ceiling: oversubscribes whenever the split is uneven
        lambda p, c: str(max(1, c // p)),  # a string
    ],
)
def test_threads_per_process_wrong_answers(fn):
    # arithmetic on fixed cases in this process: the same verdict every run
    assert verdicts(checks.threads_per_process, fn, runs=RUNS_DETERMINISTIC) == {"Not"}


def test_threads_per_process_solution():
    assert verdicts(checks.threads_per_process, lambda p, c: max(1, c // p)) == {"Correct:"}


def test_threads_per_process_needs_a_function():
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.threads_per_process(4)


def test_fork_safe_settings_placeholder_and_bad_values():
    assert verdicts(checks.fork_safe_settings, None, None, runs=RUNS_DETERMINISTIC) == {"Not"}  # refused unrun
    assert not checks.fork_safe_settings("thread", 2)
    assert not checks.fork_safe_settings("spawn", 1)


@pytest.mark.parametrize(
    ("method", "threads", "reason"),
    [
        ("spawn", 64, "oversubscribes"),  # right after the oversubscription lesson
        ("spawn", 1000, "oversubscribes"),
        ("spawn", "2", "whole number"),  # a string, not "use at least 2 threads"
        ("spawn", 2.0, "whole number"),
        (["spawn"], 2, "must be a string"),
        ("Spawn", 2, "must be one of"),
        ("spawn", True, "whole number"),
    ],
)
def test_fork_safe_settings_wrong_values_name_the_reason(method, threads, reason):
    # refused by type and range checks before any child starts: the same verdict every run
    results = {repr(checks.fork_safe_settings(method, threads)) for _ in range(RUNS_DETERMINISTIC)}
    assert len(results) == 1
    (result,) = results
    assert result.startswith("Not yet") and reason in result, result


@pytest.fixture
def openmp_pool_of_two():
    """This process has run a parallel op on 2 threads, as a notebook kernel has."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # an earlier test may have left this process single-threaded
    torch.ones(4_000_000).sum()
    yield
    torch.set_num_threads(threads)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="no fork here")
def test_fork_safe_settings_fork_hangs_every_time(openmp_pool_of_two):
    # The forked child deadlocks in OpenMP (its copy of the thread pool has no threads), so it hangs whatever
    # the limit: the verdict cannot depend on timing, and 3 runs show it.
    results = [checks.fork_safe_settings("fork", 2, timeout=1) for _ in range(RUNS_DETERMINISTIC)]
    assert [repr(r) for r in results if r or "hung" not in repr(r)] == []


def test_fork_safe_settings_spawn_is_correct_every_time():
    # 5 runs, not RUNS: each starts a fresh interpreter that imports torch (about 1.5 s of CPU), and a spawn
    # child copies nothing of this process, so what could vary between runs is only the machine's load; the
    # default deadline (the learner's cell passes none) allows for that import
    verdicts = {repr(checks.fork_safe_settings("spawn", 2)).split(" ")[0] for _ in range(5)}
    assert verdicts == {"Correct:"}


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="no fork here")
def test_fork_is_refused_even_where_no_parallel_op_ran_before():
    # a restarted kernel that went straight to the exercise: the checker runs the parallel op itself
    code = (
        "import torch\nfrom helpers.checks import orientation as c\ntorch.set_num_threads(1)\n"
        "print(repr(c.fork_safe_settings('fork', 2)))\nprint(torch.get_num_threads())"
    )
    for _ in range(RUNS_DETERMINISTIC):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        verdict, threads = out.stdout.strip().splitlines()[-2:]
        assert verdict.startswith("Not yet") and "hung" in verdict, verdict
        assert threads == "1"  # the caller's thread count is restored after the checker's own parallel op


PLACEHOLDER_SCRIPT = """
import multiprocessing as mp

def square(x):
    return x * x

mp.set_start_method("spawn")
with mp.Pool(2) as pool:
    print("results:", pool.map(square, range(4)))
"""

SOLUTION_SCRIPT = """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        print("results:", pool.map(square, range(4)))
"""

# The typical half-fix: the pool under the guard, the global set_start_method left at the top, where every
# spawn child runs it again while it starts ("context has already been set") and dies; the pool hangs.
GUARD_ONLY_SCRIPT = """
import multiprocessing as mp

def square(x):
    return x * x

mp.set_start_method("spawn")
if __name__ == "__main__":
    with mp.Pool(2) as pool:
        print("results:", pool.map(square, range(4)))
"""

# Runs, but keeps the global switch the exercise is about.
GLOBAL_SWITCH_SCRIPT = """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    mp.set_start_method("spawn")
    with mp.Pool(2) as pool:
        print("results:", pool.map(square, range(4)))
"""


@pytest.mark.parametrize("script", [PLACEHOLDER_SCRIPT, GUARD_ONLY_SCRIPT], ids=["placeholder", "guard-only"])
def test_main_guard_script_hanging_answers(script):
    # Neither script can ever print its results, whatever the time limit: their pool's workers die at
    # start-up and are replaced as fast as the pool can start them, which keeps both cores busy until the
    # watchdog kills the script, so the verdict cannot depend on the limit: 3 runs of 0.5 s each (1 s
    # burnt twice the CPU).
    results = [checks.main_guard_script(script, timeout=0.5) for _ in range(RUNS_DETERMINISTIC)]
    assert [repr(r) for r in results if r or "hung" not in repr(r)] == []


def test_main_guard_script_global_switch_is_not_yet():
    # decided by the script's text and the probe's record of spawned workers, never by time: 3 runs
    results = [checks.main_guard_script(GLOBAL_SWITCH_SCRIPT, timeout=60) for _ in range(RUNS_DETERMINISTIC)]
    assert [repr(r) for r in results if r or "get_context" not in repr(r)] == []


def test_main_guard_script_solution():
    assert verdicts(checks.main_guard_script, SOLUTION_SCRIPT, timeout=60) == {"Correct:"}


# Prints the right list without any pool: the exercise's goal (a spawn pool that works) is not met.
NO_POOL_SCRIPT = """
print("results:", [x * x for x in range(4)])
"""

# Switches to fork and drops nothing else: runs on Linux, breaks where spawn is the default (macOS, Windows).
FORK_NO_GUARD_SCRIPT = """
import multiprocessing as mp

def square(x):
    return x * x

with mp.get_context("fork").Pool(2) as pool:
    print("results:", pool.map(square, range(4)))
"""

# Guarded, but the pool uses the platform's default start method: forked on Linux up to Python 3.13.
DEFAULT_CONTEXT_SCRIPT = """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    with mp.Pool(2) as pool:
        print("results:", pool.map(square, range(4)))
"""


@pytest.mark.parametrize(
    ("script", "reason"),
    [(NO_POOL_SCRIPT, "no Pool workers"), (FORK_NO_GUARD_SCRIPT, "forked"), (DEFAULT_CONTEXT_SCRIPT, "forked")],
    ids=["no-pool", "fork-no-guard", "default-context"],
)
def test_main_guard_script_answers_that_dodge_the_spawn_pool(script, reason):
    from helpers.environment import default_start_method

    if script is DEFAULT_CONTEXT_SCRIPT and default_start_method() != "fork":
        pytest.skip("the default start method here is not fork: a default pool is spawned, as on macOS")
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork here")
    # decided by the probe's record (no workers, or forked ones), never by time: 3 runs
    results = [repr(checks.main_guard_script(script, timeout=60)) for _ in range(RUNS_DETERMINISTIC)]
    assert [r for r in results if not r.startswith("Not yet") or reason not in r] == []


def test_main_guard_script_other_answers():
    assert not checks.main_guard_script(SOLUTION_SCRIPT.replace('print("results:", ', "("), timeout=60)
    assert not checks.main_guard_script("", timeout=5)
    assert not checks.main_guard_script(None, timeout=5)
    assert not checks.main_guard_script("raise SystemExit(2)", timeout=5)


def test_fork_safe_settings_has_an_answer_on_one_usable_core(monkeypatch):
    # a laptop VM or a container with one core: 2 threads are allowed (the exercise needs 2), 3 are not
    monkeypatch.setattr("helpers.environment.usable_cores", lambda: 1)
    assert "at most 2" in repr(checks.fork_safe_settings("spawn", 3))
    assert repr(checks.fork_safe_settings("spawn", 2)).startswith("Correct:")
