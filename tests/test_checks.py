import pytest

from helpers import checks


def test_verdict_prints_and_returns(capsys):
    assert checks.verdict(True, "well done", "try again") is True
    assert checks.verdict(False, "well done", "try again") is False
    assert capsys.readouterr().out == "Correct: well done\nNot yet: try again\n"


@pytest.mark.parametrize(
    "fn, ok",
    [
        (lambda p, c: max(1, c // p), True),
        (lambda p, c: c // p, False),  # 0 threads when processes > cores
        (lambda p, c: c, False),  # oversubscribes
        (lambda p, c: None, False),
        (lambda p, c: 1 / 0, False),
        (lambda p, c: max(1.0, c / p), False),
    ],
)
def test_threads_per_process(fn, ok, capsys):
    assert checks.threads_per_process(fn) is ok
    assert capsys.readouterr().out.startswith("Correct" if ok else "Not yet")


def test_threads_per_process_needs_a_function():
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.threads_per_process(4)


def test_fork_safe_settings_verdicts(capsys):
    assert checks.fork_safe_settings(None, None) is False
    assert checks.fork_safe_settings("thread", 2) is False
    assert checks.fork_safe_settings("spawn", 1) is False
    assert checks.fork_safe_settings("spawn", 2, timeout=60) is True
    assert "Correct" in capsys.readouterr().out


def test_fork_safe_settings_catches_the_openmp_hang():
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork here")
    import torch

    torch.ones(4_000_000).sum()  # make sure OpenMP's pool exists in this process
    assert checks.fork_safe_settings("fork", 2, timeout=3) is False


GOOD = """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        print("results:", pool.map(square, range(4)))
"""


def test_main_guard_script_verdicts(capsys):
    assert checks.main_guard_script(GOOD, timeout=30) is True
    assert checks.main_guard_script(GOOD.replace("print(", "(").replace('"results:", ', ""), timeout=30) is False
    assert checks.main_guard_script("", timeout=5) is False
    assert checks.main_guard_script(None, timeout=5) is False
    assert checks.main_guard_script("raise SystemExit(2)", timeout=5) is False
