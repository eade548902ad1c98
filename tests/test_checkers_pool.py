"""The checkers of notebook 04 cannot be fooled: the unedited placeholder and the typical wrong answers get
"Not yet" 20 times out of 20, the solution "Correct" 20 times out of 20 (the course's rule for checkers)."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from helpers import checks
from helpers import pool as pools

TIMES = 20
HAS_FORK = "fork" in mp.get_all_start_methods()


def _placeholder(pool, items, bar):  # the notebook's unedited my_pipeline
    results = pool.map(pools.delayed_square, items)  # waits for every result, then counts them at once
    bar.update(len(items))
    return results


def _unordered(pool, items, bar):  # streams, but in completion order
    results = []
    for result in pool.imap_unordered(pools.delayed_square, items):
        results.append(result)
        bar.update(1)
    return results


def _bar_at_the_end(pool, items, bar):  # imap, but the bar moves only once everything is in
    results = list(pool.imap(pools.delayed_square, items))
    for _ in results:
        bar.update(1)
    return results


def _solution(pool, items, bar):  # the notebook's solution_pipeline
    results = []
    for result in pool.imap(pools.delayed_square, items):
        results.append(result)
        bar.update(1)
    return results


@pytest.fixture
def quick_tasks(monkeypatch):
    """The verdict depends on the order of calls, not on how long a task sleeps: shorten the sleeps for the
    repeated runs (forked workers inherit the patched value). One run of each at full length is below."""
    if HAS_FORK:
        monkeypatch.setattr(pools, "UNIT", 0.005)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (None, "write my_pipeline"),
        (_placeholder, "use pool.imap"),
        (_unordered, ""),  # refused for its order, or, if the order happens to match, for its method
        (_bar_at_the_end, "bar.update(1) once for each result"),
    ],
)
def test_imap_pipeline_says_not_yet_to_wrong_answers_every_time(quick_tasks, answer, words):
    verdicts = [repr(checks.imap_pipeline(answer)) for _ in range(TIMES)]
    assert all(v.startswith("Not yet:") and words in v for v in verdicts), set(verdicts)


def test_imap_pipeline_says_correct_to_the_solution_every_time(quick_tasks):
    verdicts = [repr(checks.imap_pipeline(_solution)) for _ in range(TIMES)]
    assert all(v.startswith("Correct:") for v in verdicts), set(verdicts)


def test_imap_pipeline_at_full_task_length_and_odd_answers():
    assert checks.imap_pipeline(_solution)
    assert not checks.imap_pipeline(_bar_at_the_end)
    assert "raised ZeroDivisionError" in repr(checks.imap_pipeline(lambda pool, items, bar: 1 / 0))
    assert "return the list" in repr(checks.imap_pipeline(lambda pool, items, bar: None))
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.imap_pipeline("imap")


@pytest.mark.parametrize(
    "answer",
    [
        None,  # the placeholder before the learner sets it
        pools.default_chunksize(4_000, 4),  # the unedited placeholder: what map would pick (250)
        1,  # the other reflex: no chunks at all
        10_000,
        8,  # near the best, but 40 slow files in 5 chunks for 4 workers
    ],
)
def test_chunksize_choice_says_not_yet_to_wrong_answers_every_time(answer):
    verdicts = [repr(checks.chunksize_choice(answer)) for _ in range(TIMES)]
    assert all(v.startswith("Not yet:") for v in verdicts), set(verdicts)


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
