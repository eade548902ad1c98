"""The checkers of notebook 06 cannot be fooled: the unedited placeholder, a value of the wrong type and the
wrong answers a learner plausibly writes (each found by trying it) get "Not yet" with the hint that names
the real reason, every time; the solution gets "Correct" every time (the course's rule for checkers).

Each verdict waits on a watchdog for seconds (a hang is only seen when the time is up), so the repeats
run a few at a time in forked children; fork carries this module's functions into them. TIMES calls each,
except TIMES_DETERMINISTIC for the wrong answers whose verdict the load cannot change: refused before
anything runs, hung whatever the limit, or named alike whether their run ends or is cut off."""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_module

import pytest

from helpers import checks, pitfalls

TIMES = 10
TIMES_DETERMINISTIC = 3  # verdicts no timing, load or chance can change (see the docstring): 3 calls show it is stable
PARALLEL = 5
needs_fork = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs the fork start method")


def _verdict_into(results, index, check, answer, kwargs):
    results.put((index, repr(check(answer, **kwargs))))


def _verdicts(check, answer, times=TIMES, **kwargs) -> list[str]:
    """repr(check(answer, **kwargs)), `times` times, PARALLEL at a time in forked children."""
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    got: dict[int, str] = {}
    try:
        for start in range(0, times, PARALLEL):
            batch = [
                ctx.Process(target=_verdict_into, args=(results, i, check, answer, kwargs))
                for i in range(start, min(start + PARALLEL, times))
            ]
            for proc in batch:
                proc.start()
            for _ in batch:
                index, text = results.get(timeout=180)
                got[index] = text
            for proc in batch:
                proc.join(30)
                assert proc.exitcode == 0, proc.exitcode
    finally:
        results.close()
        results.join_thread()
    return [got[i] for i in range(times)]


# ---- exercise 1: the mystery script ------------------------------------------------------------------

MYSTERY = pitfalls.SCRIPTS["mystery"]
JOIN_THEN_GET = "    worker.join()\n    features = queue.get()\n"
SOLUTION_SCRIPT = MYSTERY.replace(JOIN_THEN_GET, "    features = queue.get(timeout=60)\n    worker.join(timeout=60)\n")
TIMED_OUT = "returned after its timeout"


# TIMES where the script must run to its end within the limit, 5 at once on the machine; TIMES_DETERMINISTIC
# where it is refused unrun or hangs whatever the limit.
@needs_fork
@pytest.mark.parametrize(
    ("answer", "timeout", "words", "times"),
    [
        (None, 5.0, "must be the text of a Python script", TIMES_DETERMINISTIC),  # the unedited placeholder
        # a wrong type
        (["worker.join()"], 5.0, "must be the text of a Python script (a str), got list", TIMES_DETERMINISTIC),
        # the script unchanged: join before get, still hangs (where the stack ends depends on the load:
        # on a busy machine the watchdog can stop it before it reaches the join; the words checked do not)
        (MYSTERY, 3.0, "the script still hung", TIMES_DETERMINISTIC),
        # the chapter's checklist says "every join gets a timeout": added alone, the join still comes first
        (MYSTERY.replace("worker.join()", "worker.join(timeout=2)"), 20.0, TIMED_OUT, TIMES),
        # the same, then a second join after the get: the first one still gave up with the worker alive
        (
            MYSTERY.replace(
                JOIN_THEN_GET, "    worker.join(timeout=2)\n    features = queue.get()\n    worker.join()\n"
            ),
            20.0,
            TIMED_OUT,
            TIMES,
        ),  # fmt: skip
        # no join at all; it finishes, given time (at load 30 on 2 cores, 4 at once took over 5 s)
        (MYSTERY.replace("    worker.join()\n", ""), 20.0, "join the worker", TIMES),
        # kill the worker that "hangs": its item is lost with it, and the get waits forever
        (
            MYSTERY.replace("worker.join()", "worker.join(timeout=1)\n    worker.terminate()"),
            4.0,
            "the script still hung",
            TIMES_DETERMINISTIC,
        ),
        # the worker gives up flushing its item: it exits, and the get waits forever
        (
            MYSTERY.replace("    queue.put(", "    queue.cancel_join_thread()\n    queue.put("),
            4.0,
            "the script still hung",
            TIMES_DETERMINISTIC,
        ),
        # fewer features, so that the item fits in the pipe: no hang, but not the script's job any more
        (MYSTERY.replace("range(1_000_000)", "range(1000)"), 20.0, "print 'features: 1000000'", TIMES),
        # no worker process at all
        (
            MYSTERY.replace(
                "    worker.start()\n" + JOIN_THEN_GET, "    make_features(queue)\n    features = queue.get()\n"
            ),
            20.0,
            "in a worker process",
            TIMES,
        ),  # fmt: skip
    ],
)
def test_fixed_mystery_says_not_yet_to_wrong_answers_every_time(answer, timeout, words, times):
    verdicts = _verdicts(checks.fixed_mystery, answer, times=times, timeout=timeout)
    assert all(v.startswith("Not yet:") and words in v for v in verdicts), set(verdicts)


@needs_fork
@pytest.mark.parametrize(
    "answer",
    [
        SOLUTION_SCRIPT,  # the notebook's solution cell
        MYSTERY.replace(JOIN_THEN_GET, "    features = queue.get()\n    worker.join()\n"),  # the order alone
    ],
)
def test_fixed_mystery_says_correct_to_the_solution_every_time(answer):
    assert answer != MYSTERY
    verdicts = _verdicts(checks.fixed_mystery, answer, timeout=20.0)
    assert all(v.startswith("Correct:") for v in verdicts), set(verdicts)


def test_the_recorder_leaves_no_frame_of_its_own_in_a_hint():
    verdict = repr(checks.fixed_mystery(MYSTERY, timeout=3.0))
    assert verdict.startswith("Not yet: the script still hung"), verdict
    assert "_recorded" not in verdict and "run_path" not in verdict, verdict


# ---- exercise 2: a get that cannot hang ----------------------------------------------------------------


def _blocking_get(queue, producer, timeout):  # the tutorial's get: no timeout
    return queue.get()


def _one_timeout(queue, producer, timeout):  # gives up after one timeout
    return queue.get(timeout=timeout)


def _exitcode_check(queue, producer, timeout):  # exitcode is None while the producer lives, not 0
    while True:
        try:
            return queue.get(timeout=timeout)
        except queue_module.Empty:
            if producer.exitcode != 0:
                raise RuntimeError("producer died") from None


def _retry_forever(queue, producer, timeout):  # a timeout on every get, but never asks the producer
    while True:
        try:
            return queue.get(timeout=timeout)
        except queue_module.Empty:
            continue


def _returns_none(queue, producer, timeout):  # notices the death but reports nothing
    while True:
        try:
            return queue.get(timeout=timeout)
        except queue_module.Empty:
            if not producer.is_alive():
                return None


def _reraises_empty(queue, producer, timeout):  # notices the death but raises queue.Empty
    while True:
        try:
            return queue.get(timeout=timeout)
        except queue_module.Empty:
            if not producer.is_alive():
                raise


def _long_fixed_wait(queue, producer, timeout):  # one long wait instead of asking the producer
    try:
        return queue.get(timeout=10 * timeout)
    except queue_module.Empty:
        raise RuntimeError("nothing came") from None


def _two_arguments(queue, timeout):  # the producer argument forgotten
    return queue.get(timeout=timeout)


def _no_last_look(queue, producer, timeout):  # gives up when the producer is gone, its last item unread
    while True:
        try:
            return queue.get(timeout=timeout)
        except queue_module.Empty:
            if not producer.is_alive():
                raise RuntimeError(f"producer exited with code {producer.exitcode} and sent nothing") from None


def _solution_safe_get(queue, producer, timeout):  # the notebook's solution cell
    while True:
        try:
            return queue.get(timeout=timeout)
        except queue_module.Empty:
            if producer.is_alive():
                continue
            try:  # it may have sent its item just before it exited: what it put is in the queue now
                return queue.get_nowait()
            except queue_module.Empty:
                raise RuntimeError(f"producer exited with code {producer.exitcode} and sent nothing") from None


def _empty_check(queue, producer, timeout):  # another right answer: give up only when gone and empty
    while True:
        try:
            return queue.get(timeout=timeout)
        except queue_module.Empty:
            if not producer.is_alive() and queue.empty():
                raise RuntimeError("producer gone, queue empty") from None


# TIMES where a trial must end within the watchdog's limit, or the verdict times the raise;
# TIMES_DETERMINISTIC where it is refused unrun, or (one timeout) named alike whether the trial ends or is cut off.
@needs_fork
@pytest.mark.parametrize(
    ("answer", "words", "times"),
    [
        (None, "write my_safe_get", TIMES_DETERMINISTIC),  # the unedited placeholder
        # a wrong type: a verdict, no traceback
        (42, "must be a function (queue, producer, timeout), got int", TIMES_DETERMINISTIC),
        (_one_timeout, "A timeout alone does not mean the producer is gone", TIMES_DETERMINISTIC),
        (_exitcode_check, "exitcode is None", TIMES),
        (_two_arguments, "must take three arguments", TIMES),
        (_blocking_get, "A get() without a timeout waits forever", TIMES),
        (_retry_forever, "without asking producer.is_alive()", TIMES),
        (_returns_none, "returned None; raise RuntimeError", TIMES),
        (_reraises_empty, "raised Empty; raise RuntimeError", TIMES),
        (_long_fixed_wait, "a long fixed wait is not the answer", TIMES),
        (_no_last_look, "get once more without waiting", TIMES),  # the course's own answer until this round
    ],
)
def test_safe_get_says_not_yet_to_wrong_answers_every_time(answer, words, times):
    verdicts = _verdicts(checks.safe_get, answer, times=times)
    assert all(v.startswith("Not yet:") and words in v for v in verdicts), set(verdicts)


@needs_fork
@pytest.mark.parametrize("answer", [_solution_safe_get, _empty_check])
def test_safe_get_says_correct_to_the_solution_every_time(answer):
    verdicts = _verdicts(checks.safe_get, answer)
    assert all(v.startswith("Correct:") for v in verdicts), set(verdicts)
