import multiprocessing as mp
import os

import pytest

from helpers import environment


def test_usable_cores_is_within_the_machine():
    cores = environment.usable_cores()
    assert 1 <= cores <= (os.cpu_count() or cores)


def test_default_start_method_is_available_and_not_fixed():
    method = environment.default_start_method()
    assert method in mp.get_all_start_methods()


def test_report_has_the_facts_later_notebooks_use():
    facts = environment.report()
    for key in ("cores (usable)", "default start method", "torch", "/dev/shm", "torch intra-op threads"):
        assert key in facts
    text = environment.format_report(facts)
    assert text.count("\n") == len(facts) - 1


def test_shm_bytes():
    shm = environment.shm_bytes()
    if shm is not None:
        total, free = shm
        assert 0 <= free <= total


def test_format_report_rejects_non_dicts():
    with pytest.raises(TypeError, match="facts must be a dict"):
        environment.format_report([("a", 1)])
