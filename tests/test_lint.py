"""ruff on the code and, through nbqa, on the notebooks' code cells: one style everywhere."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_on_helpers_and_tests():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "helpers", "tests"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_on_helpers_and_tests():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "helpers", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, "run `ruff format helpers tests`\n" + result.stdout + result.stderr


def test_ruff_on_notebooks():
    result = subprocess.run(
        [sys.executable, "-m", "nbqa", "ruff", "notebooks"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
