"""The checkers of notebook 04 cannot be fooled: the unedited placeholder and wrong answers a learner would
plausibly write (each tried) get "Not yet" every time, with a hint naming the real reason; the solution gets
"Correct" every time (the course's rule for checkers). The pipeline's verdict is measured: results in input
order, the bar moving while the pool works."""

from __future__ import annotations

import pytest

from helpers import checks
from helpers import pool as pools

TIMES = 20
TIMES_DETERMINISTIC = 3  # wrong answers whose verdict no timing, load or chance can change: 3 calls show it is stable


F = pools.delayed_square
TIMED = 5  # the pipeline's verdict is measured (about 1 s a call at the tasks' full length): 5 calls each


def _placeholder(pool, items, bar):  # the notebook's unedited my_pipeline
    results = pool.map(pools.delayed_square, items)  # waits for every result, then counts them at once
    bar.update(len(items))
    return results


def _one_big_chunk(pool, items, bar):  # imap, but every result arrives at once (issue 37)
    results = []
    for result in pool.imap(F, items, chunksize=len(items)):
        results.append(result)
        bar.update(1)
    return results


def _chunks_of_three(pool, items, bar):  # two chunks for two workers: nothing arrives until half-way
    results = []
    for result in pool.imap(F, items, chunksize=3):
        results.append(result)
        bar.update(1)
    return results


def _bar_at_the_end(pool, items, bar):  # imap, but the bar moves only once everything is in
    results = list(pool.imap(F, items))
    for _ in results:
        bar.update(1)
    return results


def _map_async_then_count(pool, items, bar):  # asynchronous, but .get() waits for all of them
    results = pool.map_async(F, items).get(60)
    for _ in results:
        bar.update(1)
    return results


def _bar_ahead(pool, items, bar):  # the bar counts the tasks handed out, not the results received
    for _ in items:
        bar.update(1)
    return pool.map(F, items)


def _unordered(pool, items, bar):  # streams, but in completion order
    results = []
    for result in pool.imap_unordered(F, items):
        results.append(result)
        bar.update(1)
    return results


def _solution(pool, items, bar):  # the notebook's solution_pipeline
    results = []
    for result in pool.imap(pools.delayed_square, items):
        results.append(result)
        bar.update(1)
    return results


def _apply_async_in_order(pool, items, bar):  # another way to the same goal: accepted, since it reaches it
    handles = [pool.apply_async(F, (x,)) for x in items]
    results = []
    for handle in handles:
        results.append(handle.get(60))
        bar.update(1)
    return results


def _one_at_a_time(pool, items, bar):  # input order, a bar that streams, but the second worker never works
    results = []
    for x in items:
        results.append(pool.apply_async(F, (x,)).get(60))
        bar.update(1)
    return results


def _map_per_item(pool, items, bar):  # the same, one map call per item
    results = []
    for x in items:
        results += pool.map(F, [x])
        bar.update(1)
    return results


def _apply_per_item(pool, items, bar):  # the same with the blocking apply
    results = []
    for x in items:
        results.append(pool.apply(F, (x,)))
        bar.update(1)
    return results


def _generator(pool, items, bar):  # yields instead of returning a list: the checker runs it in time
    for result in pool.imap(F, items):
        bar.update(1)
        yield result


# TIMED where the verdict rests on when results and bar updates came (the first update against the run's
# length; the order imap_unordered's workers finish in); TIMES_DETERMINISTIC where it does not: no pipeline,
# a type, a raise, a return value, the bar's step sizes, or a bar counted before the map was even called.
@pytest.mark.parametrize(
    ("answer", "words", "times"),
    [
        (None, "write my_pipeline", TIMES_DETERMINISTIC),
        ("pool.imap", "must be a function", TIMES_DETERMINISTIC),  # a wrong type gets a verdict, not a traceback
        (_placeholder, "updated by [6]", TIMES_DETERMINISTIC),
        (_one_big_chunk, "all at once", TIMED),
        (_chunks_of_three, "all at once", TIMED),
        (_bar_at_the_end, "all at once", TIMED),
        (_map_async_then_count, "all at once", TIMED),
        (_bar_ahead, "before they had arrived", TIMES_DETERMINISTIC),
        (_unordered, "input order", TIMED),
        (_one_at_a_time, "never had two of your tasks", TIMES_DETERMINISTIC),
        (_map_per_item, "never had two of your tasks", TIMES_DETERMINISTIC),
        (_apply_per_item, "never had two of your tasks", TIMES_DETERMINISTIC),
        (lambda pool, items, bar: None, "return the list", TIMES_DETERMINISTIC),
        (lambda pool, items, bar: 1 / 0, "raised ZeroDivisionError", TIMES_DETERMINISTIC),
    ],
)
def test_imap_pipeline_says_not_yet_to_wrong_answers_every_time(answer, words, times):
    verdicts = [repr(checks.imap_pipeline(answer)) for _ in range(times)]
    assert all(v.startswith("Not yet:") and words in v for v in verdicts), set(verdicts)


@pytest.mark.parametrize("answer", [_solution, _apply_async_in_order, _generator])
def test_imap_pipeline_says_correct_to_the_goal_reached_every_time(answer):
    verdicts = [repr(checks.imap_pipeline(answer)) for _ in range(TIMED)]
    assert all(v.startswith("Correct:") for v in verdicts), set(verdicts)


@pytest.mark.parametrize(
    "answer",
    [
        None,  # the placeholder before the learner sets it
        pools.default_chunksize(4_000, 4),  # the unedited placeholder: what map would pick (250)
        1,  # the other reflex: no chunks at all
        10_000,
        4_000,  # one chunk: one worker does everything
        100,  # a round number, still 40 slow files in one chunk
        8,  # near the best, but 40 slow files in 5 chunks for 4 workers
        20,  # near the best, but 40 slow files in 2 chunks
        "10",  # the right number as a string: a verdict, not a traceback
        2.5,
    ],
)
def test_chunksize_choice_says_not_yet_to_wrong_answers_every_time(answer):
    # judged by the makespan model on fixed durations, nothing measured: the same verdict every call
    verdicts = [repr(checks.chunksize_choice(answer)) for _ in range(TIMES_DETERMINISTIC)]
    assert all(v.startswith("Not yet:") for v in verdicts), set(verdicts)
    if answer is not None:  # the hint names what is wrong: the type, or the two costs to weigh
        assert "whole number" in verdicts[0] or ("overhead" in verdicts[0] and "slow tail" in verdicts[0])


def test_chunksize_choice_not_yet_gives_neither_the_best_nor_a_direction():
    for answer in (1, 250):
        message = repr(checks.chunksize_choice(answer))
        assert "best:" not in message and "260" not in message
        assert "overhead" in message and "slow tail" in message  # both costs are named, for every answer


def test_chunksize_choice_says_correct_to_the_solution_every_time():
    durations = pools.tail_heavy_durations()
    makespan = {c: pools.simulate_makespan(durations, 4, c, 0.0001) for c in range(1, 401)}
    solution = min(makespan, key=makespan.get)  # the notebook's solution cell
    verdicts = [repr(checks.chunksize_choice(solution)) for _ in range(TIMES)]
    assert all(v.startswith("Correct:") for v in verdicts), set(verdicts)
    for value in (0, 2.5, True):
        assert "whole number" in repr(checks.chunksize_choice(value))
