"""Checkers for notebook 06 (deadlocks and pitfalls).

Each checks what the exercise asks for, measured while the learner's code runs: for exercise 1, that the
script prints its features and that every join it makes returns because the worker has exited (a join whose
timeout ran out with the worker still alive fixed nothing; it only stopped waiting); for exercise 2, that
the function waits for a living producer however slow and notices a dead one within a few timeouts.
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from helpers.checks.core import Verdict, fork_or_none, verdict

__all__ = ["fixed_mystery", "safe_get"]

# Runs the learner's script as `__main__` (as `python script.py` would; spawn children re-import it by path)
# and records, in the main process only, every process started and what each join found. Written to the
# report file when the script ends, however it ends.
_RECORDER = r"""
import json, os, runpy, sys, time
from multiprocessing import process

_main, _report = os.getpid(), sys.argv[1]
_started, _joins = [], []
_start, _join = process.BaseProcess.start, process.BaseProcess.join


def _recorded_start(self):
    _start(self)
    if os.getpid() == _main:
        _started.append(self)


def _recorded_join(self, timeout=None):
    began = time.monotonic()
    _join(self, timeout)
    if os.getpid() == _main:
        _joins.append({"id": id(self), "timeout": timeout, "alive after": self.exitcode is None,
                       "seconds": round(time.monotonic() - began, 2)})


process.BaseProcess.start, process.BaseProcess.join = _recorded_start, _recorded_join
try:
    runpy.run_path(sys.argv[2], run_name="__main__")
finally:
    joined = {j["id"] for j in _joins if not j["alive after"]}
    with open(_report, "w") as f:
        json.dump({"started": len(_started), "never joined": sum(id(p) not in joined for p in _started),
                   "joins": [{k: v for k, v in j.items() if k != "id"} for j in _joins]}, f)
"""


def _run_recorded(source: str, timeout: float) -> tuple[Any, dict[str, Any] | None]:
    """Run the learner's script under the watchdog with the recorder; its outcome and the record (None
    when the script did not get to its end)."""
    from helpers import watchdog

    with tempfile.TemporaryDirectory(prefix="exercise-") as tmp:
        script, recorder, report = Path(tmp, "exercise.py"), Path(tmp, "recorder.py"), Path(tmp, "report.json")
        script.write_text(inspect.cleandoc(source) + "\n")
        recorder.write_text(_RECORDER)
        outcome = watchdog.run_script(recorder, [str(report), str(script)], timeout=timeout, env=dict(os.environ))
        try:
            return outcome, json.loads(report.read_text())
        except (OSError, ValueError):
            return outcome, None


def _said(outcome: Any) -> str:
    """The watchdog's summary of a script's outcome, without the recorder's own frames."""
    if outcome.status == "hung":
        names = []
        for name in outcome.stuck_in:
            if name == "_run_code":  # runpy's frames and the recorder's module: not the learner's
                break
            if not name.startswith("_recorded_"):
                names.append(f"`{name}`")
        return f"hung: killed after {outcome.timeout:.1f} s" + (f", stuck in {' <- '.join(names)}" if names else "")
    if outcome.status == "raised":
        return f"raised {outcome.error}"
    if outcome.status == "died":
        return f"died of {outcome.signal}"
    return f"exited with code {outcome.value}"


def fixed_mystery(source: Any, timeout: float = 5.0) -> Verdict:
    """Exercise 1: the learner's fixed version of `pitfalls.SCRIPTS["mystery"]` must finish, print all the
    features, and join its worker after the worker has exited (not after a join's timeout ran out)."""
    if not isinstance(source, str) or not source.strip():
        got = "nothing yet" if source is None else type(source).__name__
        return verdict(False, "", f"my_fixed_script must be the text of a Python script (a str), got {got}.")
    outcome, record = _run_recorded(source, timeout)
    if outcome.status == "hung":
        return verdict(
            False,
            "",
            f"the script still {_said(outcome)}. What must happen to the queued item before the worker can exit?",
        )
    if outcome.status != "returned":
        return verdict(False, "", f"the script {_said(outcome)}.")
    if "features: 1000000" not in outcome.stderr:
        return verdict(False, "", "the script must still make all the features and print 'features: 1000000'.")
    if record is None or record["started"] == 0:
        return verdict(False, "", "the script must still compute the features in a worker process.")
    timed_out = [j for j in record["joins"] if j["alive after"]]
    if timed_out:
        return verdict(
            False,
            "",
            f"a join returned after its timeout ({timed_out[0]['timeout']} s) with the worker still running: "
            "the timeout only stopped the wait. The worker could not exit because its item was still in the "
            "pipe; change the order so that the join finds it already gone.",
        )
    if record["never joined"]:
        return verdict(False, "", "it finished, but join the worker (after the get) so that it is not left behind.")
    return verdict(True, "get first, then join: the worker's feeder thread can hand over its item and exit.", "")


def safe_get(fn: Any, timeout: float = 10.0) -> Verdict:
    """Exercise 2: `fn(queue, producer, timeout)` returns the item of a living producer however late it
    comes (here after six timeouts), raises RuntimeError within a few timeouts of the producer's death,
    and returns an item the producer sent just before it exited (one of `fn`'s gets is made to time out
    just before the item arrives: under load that happens by itself). Each case runs under the watchdog
    (pinned to fork, since `fn` is defined in the notebook)."""
    from helpers import pitfalls, watchdog

    if fn is None:
        return verdict(False, "", "write my_safe_get, then run this cell again.")
    if not callable(fn):
        return verdict(
            False, "", f"my_safe_get must be a function (queue, producer, timeout), got {type(fn).__name__}."
        )
    if fork_or_none() is None:
        return verdict(False, "", "this checker needs the fork start method (Linux or macOS).")
    wait = 0.5
    slow = watchdog.run(pitfalls.safe_get_trial, fn, "slow", wait, timeout=timeout, start_method="fork")
    said = slow.value["result"] if slow.status == "returned" else str(slow)
    if said != "returned 'payload'":
        if said.startswith("raised RuntimeError"):
            why = (
                "It gave up while the producer was alive (a living process's exitcode is None, not 0): give up "
                "only when producer.is_alive() is False."
            )
        elif said.startswith("raised TypeError"):
            why = "It must take three arguments, (queue, producer, timeout), and return the item."
        else:
            why = "A timeout alone does not mean the producer is gone: ask it, and wait again while it lives."
        return verdict(
            False,
            "",
            f"the producer was alive and sent its item after {pitfalls.SLOW_SEND:g} s; your function {said}. {why}",
        )
    dead = watchdog.run(pitfalls.safe_get_trial, fn, "crash", wait, timeout=timeout, start_method="fork")
    if dead.status == "hung":
        return verdict(
            False,
            "",
            f"with a producer that crashed, the call {dead}. A get() without a timeout waits forever, and so does "
            "a loop that waits again after every timeout without asking producer.is_alive().",
        )
    said = dead.value["result"] if dead.status == "returned" else str(dead)
    if not said.startswith("raised RuntimeError"):
        return verdict(False, "", f"with a producer that crashed, your function {said}; raise RuntimeError instead.")
    late = dead.value["after crash"]
    if late is not None and late > 4 * wait:
        return verdict(
            False,
            "",
            f"it raised {late:.1f} s after the producer died, with timeout={wait}: a long fixed wait is not the "
            "answer (a slower producer would still be cut off). Wait one timeout at a time, and after each ask "
            "producer.is_alive().",
        )
    late = watchdog.run(pitfalls.safe_get_trial, fn, "sent_then_exited", wait, timeout=timeout, start_method="fork")
    said = late.value["result"] if late.status == "returned" else str(late)
    if said != "returned 'payload'":
        return verdict(
            False,
            "",
            f"the producer sent its item and exited just as one of your gets timed out; your function {said}, "
            "with the item in the queue. A producer that ended on its own has written everything it put: when "
            "producer.is_alive() is False, get once more without waiting (queue.get_nowait()) before you give up.",
        )
    return verdict(
        True,
        "it waits for a slow producer, reports a dead one instead of hanging, and takes an item sent just "
        "before the producer exited.",
        "",
    )
