"""`python -m helpers.diagnose` on a corpus of real failing scripts (tests/diagnose_corpus): each case's
verdict must contain the cause its source thread found, and say nothing (or "not hung") where there is no
bug. The cases run two at a time the first time a test needs them (most of a hang case is waiting for its
deadline); a case that cannot reproduce here is skipped with its reason, not dropped.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

import machine_speed
import pytest

_PATH = Path(__file__).parent / "diagnose_corpus" / "corpus.py"
_SPEC = importlib.util.spec_from_file_location("diagnose_corpus", _PATH)
corpus = importlib.util.module_from_spec(_SPEC)
sys.modules["diagnose_corpus"] = corpus
_SPEC.loader.exec_module(corpus)

CASES = corpus.cases()


@functools.lru_cache(maxsize=1)
def outcomes() -> dict[str, corpus.Outcome]:
    runnable = [case for case in CASES if not corpus.can_run(case)]
    return {outcome.case.name: outcome for outcome in corpus.run_all(runnable, jobs=2)}


def test_the_corpus_has_twenty_real_cases_with_full_headers() -> None:
    assert len(CASES) >= 20
    for case in CASES:
        assert case.fields["Source"].startswith("https://"), case.name
        for key in ("Cause", "Changed", "Expect", "Timeout"):
            assert case.fields.get(key), f"{case.name}: no {key}"


def test_no_case_ends_its_own_hang_before_the_deadline() -> None:
    # a case whose group timed out after 60 s ended on its own under a deadline the load had stretched to 62 s
    for case in CASES:
        assert not machine_speed.too_short_for_a_hang(case.path.read_text()), case.name


# The first case's test runs all of them (two at a time, cached for the others): 45 cases took 72 s at a load
# average under 1 (the whole file 92 s), 532 s at a load
# average of 4 to 5 on the 2 cores (other sessions' runs beside them), more than pytest-timeout's 300 s a test.
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_verdict_names_the_recorded_cause(case: corpus.Case) -> None:
    why_not = corpus.can_run(case)
    if why_not:
        pytest.skip(f"does not reproduce here: {why_not}")
    outcome = outcomes()[case.name]
    assert not corpus.problems(outcome), "\n".join(corpus.problems(outcome)) + "\n" + outcome.report
    report = outcome.report
    assert not report or "nothing left running" in report or "what happened:" in report, report
