"""The checkers of notebook 06 cannot be fooled: the unedited placeholder and the typical wrong answers get
"Not yet" 20 times out of 20, the solution "Correct" 20 times out of 20 (the course's rule for checkers).

Each verdict waits on a watchdog for seconds (a hang is only seen when the time is up), so the repeats
run a few at a time in forked children; fork carries this module's functions into them."""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_module

import pytest

from helpers import checks, pitfalls

TIMES = 20
PARALLEL = 4
needs_fork = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs the fork start method")


def _verdict_into(results, index, check, answer, kwargs):
    results.put((index, repr(check(answer, **kwargs))))


def _verdicts(check, answer, **kwargs) -> list[str]:
    """repr(check(answer, **kwargs)), TIMES times, PARALLEL at a time in forked children."""
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    got: dict[int, str] = {}
    try:
        for start in range(0, TIMES, PARALLEL):
            batch = [
                ctx.Process(target=_verdict_into, args=(results, i, check, answer, kwargs))
                for i in range(start, min(start + PARALLEL, TIMES))
            ]
            for proc in batch:
                proc.start()
            for _ in batch:
                index, text = results.get(timeout=120)
                got[index] = text
            for proc in batch:
                proc.join(30)
                assert proc.exitcode == 0, proc.exitcode
    finally:
        results.close()
        results.join_thread()
    return [got[i] for i in range(TIMES)]


# ---- exercise 1: the mystery script ------------------------------------------------------------------

MYSTERY = pitfalls.SCRIPTS["mystery"]
SOLUTION_SCRIPT = MYSTERY.replace(  # the notebook's solution cell
    "    worker.join()\n    features = queue.get()\n",
    "    features = queue.get(timeout=60)\n    worker.join(timeout=60)\n",
)


@needs_fork
@pytest.mark.parametrize(
    ("answer", "timeout", "words"),
    [
        (None, 5.0, "must be the text of a Python script"),  # the unedited placeholder
        # the script unchanged: join before get, still hangs (where the stack ends depends on the load:
        # on a busy machine the watchdog can stop it before it reaches the join)
        (MYSTERY, 3.0, "the script still hung"),
        # no join at all; it finishes, given time (at load 30 on 2 cores, 4 at once took over 5 s)
        (MYSTERY.replace("    worker.join()\n", ""), 20.0, "join the worker"),
    ],
)
def test_fixed_mystery_says_not_yet_to_wrong_answers_every_time(answer, timeout, words):
    verdicts = _verdicts(checks.fixed_mystery, answer, timeout=timeout)
    assert all(v.startswith("Not yet:") and words in v for v in verdicts), set(verdicts)


@needs_fork
def test_fixed_mystery_says_correct_to_the_solution_every_time():
    assert SOLUTION_SCRIPT != MYSTERY
    verdicts = _verdicts(checks.fixed_mystery, SOLUTION_SCRIPT)
    assert all(v.startswith("Correct:") for v in verdicts), set(verdicts)


# ---- exercise 2: a get that cannot hang ----------------------------------------------------------------


def _blocking_get(queue, producer, timeout):  # the tutorial's get: no timeout
    return queue.get()


def _one_timeout(queue, producer, timeout):  # the typical wrong answer: gives up after one timeout
    return queue.get(timeout=timeout)


def _solution_safe_get(queue, producer, timeout):  # the notebook's solution cell
    while True:
        try:
            return queue.get(timeout=timeout)
        except queue_module.Empty:
            if not producer.is_alive():
                raise RuntimeError(f"producer exited with code {producer.exitcode} and sent nothing") from None


@needs_fork
@pytest.mark.parametrize(
    ("answer", "timeout", "words"),
    [
        (None, 8.0, "write my_safe_get"),  # the unedited placeholder
        (_one_timeout, 8.0, "slower than one timeout"),
        # 6 s, not less: the blocking get must first pass the slow case, where the producer sends after
        # 1.5 s; with 3 s, a busy machine (run Y) made that case hang and the checker gave the slow case's hint.
        (_blocking_get, 6.0, "Never get() without a timeout"),
    ],
)
def test_safe_get_says_not_yet_to_wrong_answers_every_time(answer, timeout, words):
    verdicts = _verdicts(checks.safe_get, answer, timeout=timeout)
    assert all(v.startswith("Not yet:") and words in v for v in verdicts), set(verdicts)


@needs_fork
def test_safe_get_says_correct_to_the_solution_every_time():
    verdicts = _verdicts(checks.safe_get, _solution_safe_get)
    assert all(v.startswith("Correct:") for v in verdicts), set(verdicts)
    with pytest.raises(TypeError):
        checks.safe_get(42)
