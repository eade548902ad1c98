"""ruff on the code and, through nbqa, on the notebooks' code cells: one style everywhere."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CODE = ["helpers", "tests", "tools", "examples", "conftest.py"]


def test_ruff_on_the_code():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", *CODE], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_on_helpers_and_tests():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *CODE],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, "run `ruff format " + " ".join(CODE) + "`\n" + result.stdout + result.stderr


def test_ruff_on_notebooks():
    result = subprocess.run(
        [sys.executable, "-m", "nbqa", "ruff", "notebooks"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
