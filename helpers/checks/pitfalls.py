"""Checkers for notebook 06 (deadlocks and pitfalls)."""

from __future__ import annotations

from typing import Any

from helpers.checks.core import Verdict, not_ready, run_source, verdict

__all__ = ["fixed_mystery", "safe_get"]


def fixed_mystery(source: Any, timeout: float = 5.0) -> Verdict:
    """Exercise: the learner's fixed version of `pitfalls.SCRIPTS["mystery"]` must finish, print the
    number of features, and still join its worker."""
    outcome = run_source(source, timeout)
    if outcome is None:
        return verdict(False, "", "my_fixed_script must be the text of a Python script.")
    if outcome.status == "hung":
        return verdict(
            False,
            "",
            f"the script still {outcome}. What must happen to the queued item before the worker can exit?",
        )
    if outcome.status != "returned":
        return verdict(False, "", f"the script {outcome}.")
    if "features: 1000000" not in outcome.stderr:
        return verdict(False, "", "keep the print: the script should print 'features: 1000000'.")
    if ".join(" not in source:
        return verdict(False, "", "it finished, but join the worker (after the get) so that it is not left behind.")
    return verdict(True, "get first, then join: the worker's feeder thread can hand over its item and exit.", "")


def safe_get(fn: Any, timeout: float = 8.0) -> Verdict:
    """Exercise: `fn(queue, producer, timeout)` returns the producer's item, however slowly it comes, and
    raises RuntimeError soon after the producer dies without sending. Each case runs under the watchdog
    (pinned to fork, since `fn` is defined in the notebook)."""
    if (unready := not_ready(fn, "my_safe_get", "(queue, producer, timeout) -> item")) is not None:
        return unready
    from helpers import pitfalls, watchdog

    slow = watchdog.run(pitfalls.safe_get_trial, fn, False, timeout=timeout, start_method="fork")
    if slow.status != "returned" or slow.value != "returned 'payload'":
        said = slow.value if slow.status == "returned" else str(slow)
        return verdict(
            False,
            "",
            f"with a producer that is alive but slower than one timeout, your function {said}. A timeout "
            "alone does not mean the producer is gone: ask it.",
        )
    dead = watchdog.run(pitfalls.safe_get_trial, fn, True, timeout=timeout, start_method="fork")
    if dead.status == "hung":
        return verdict(False, "", f"with a producer that crashed, the call {dead}. Never get() without a timeout.")
    if dead.status != "returned" or not str(dead.value).startswith("raised RuntimeError"):
        said = dead.value if dead.status == "returned" else str(dead)
        return verdict(False, "", f"with a producer that crashed, your function {said}; raise RuntimeError instead.")
    return verdict(True, "it waits for a slow producer and reports a dead one instead of hanging.", "")
