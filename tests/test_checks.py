from helpers import checks


def test_verdict_is_truthy_only_when_right_and_reads_as_one_line():
    good, bad = checks.verdict(True, "well done", "try again"), checks.verdict(False, "well done", "try again")
    assert bool(good) is True and repr(good) == "Correct: well done"
    assert bool(bad) is False and repr(bad) == "Not yet: try again"
