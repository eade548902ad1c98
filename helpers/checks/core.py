"""What every checker shares: the `Verdict` it returns and the first steps of checking learner code."""

from __future__ import annotations

from typing import Any

__all__ = ["Verdict", "verdict", "fork_or_none", "not_ready", "run_source"]


class Verdict:
    """The result of a checker: `bool(v)` says whether the answer is right, `repr(v)` says why."""

    def __init__(self, ok: bool, message: str) -> None:
        self.ok = bool(ok)
        self.message = message

    def __bool__(self) -> Verdict:
        return self.ok

    def __repr__(self) -> str:
        return self.message


def verdict(ok: bool, praise: str, hint: str) -> Verdict:
    """`Correct: praise` when ok, else `Not yet: hint`."""
    return Verdict(ok, f"Correct: {praise}" if ok else f"Not yet: {hint}")


def fork_or_none() -> str | None:
    """Exercise code defined in a notebook can reach DataLoader workers only by fork (spawn re-imports
    by name); the checkers pin it, and say so where it does not exist."""
    import multiprocessing as mp

    return "fork" if "fork" in mp.get_all_start_methods() else None


def not_ready(fn: Any, variable: str, signature: str, needs_fork: bool = True) -> Verdict | None:
    """The first steps every checker of learner code shares: nothing written yet (the placeholder is
    None), not a function, or no fork to carry a notebook function into child processes."""
    if fn is None:
        return verdict(False, "", f"write {variable}, then run this cell again.")
    if not callable(fn):
        raise TypeError(f"fn must be a function {signature}, got {type(fn).__name__}")
    if needs_fork and fork_or_none() is None:
        return verdict(False, "", "this checker needs the fork start method (Linux or macOS).")
    return None


def run_source(source: Any, timeout: float) -> Any:
    """Run the text of a learner's script as a file under the watchdog; its Outcome, or None when
    `source` is not the text of a script (the checker then asks for one)."""
    import inspect
    import tempfile
    from pathlib import Path

    from helpers import watchdog

    if not isinstance(source, str) or not source.strip():
        return None
    with tempfile.TemporaryDirectory(prefix="exercise-") as tmp:
        path = Path(tmp, "exercise.py")
        path.write_text(inspect.cleandoc(source) + "\n")
        return watchdog.run_script(path, timeout=timeout)
