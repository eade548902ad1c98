import multiprocessing as mp

import pytest

from helpers import checks


def test_verdict_is_truthy_only_when_right_and_reads_as_one_line():
    good, bad = checks.verdict(True, "well done", "try again"), checks.verdict(False, "well done", "try again")
    assert bool(good) is True and repr(good) == "Correct: well done"
    assert bool(bad) is False and repr(bad) == "Not yet: try again"


def test_imap_pipeline_checker():
    from helpers.pool import delayed_square

    def streaming(method):
        def pipeline(pool, items, bar):
            results = []
            for result in getattr(pool, method)(delayed_square, items):
                results.append(result)
                bar.update(1)
            return results

        return pipeline

    def all_at_once(pool, items, bar):
        results = pool.map(delayed_square, items)
        bar.update(len(items))
        return results

    def bar_at_the_end(pool, items, bar):
        results = list(pool.imap(delayed_square, items))
        for _ in results:
            bar.update(1)
        return results

    assert not checks.imap_pipeline(None)
    assert checks.imap_pipeline(streaming("imap"))
    assert "pool.imap" in repr(checks.imap_pipeline(all_at_once))
    assert not checks.imap_pipeline(streaming("imap_unordered"))
    assert "bar.update(1)" in repr(checks.imap_pipeline(bar_at_the_end))
    assert "raised ZeroDivisionError" in repr(checks.imap_pipeline(lambda pool, items, bar: 1 / 0))
    assert "return the list" in repr(checks.imap_pipeline(lambda pool, items, bar: None))
    with pytest.raises(TypeError, match="fn must be a function"):
        checks.imap_pipeline("imap")


@pytest.mark.parametrize(
    "value, ok, words",
    [
        (None, False, "set my_chunksize"),
        (0, False, "whole number"),
        (2.5, False, "whole number"),
        (True, False, "whole number"),
        (1, False, "overhead"),
        (250, False, "slow tail"),  # map's default for 4,000 tasks on 4 workers
        (10_000, False, "slow tail"),
        (10, True, "Correct"),
        (5, True, "Correct"),
    ],
)
def test_chunksize_choice_checker(value, ok, words):
    result = checks.chunksize_choice(value)
    assert bool(result) is ok and words in repr(result)
