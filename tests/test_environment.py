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


_AFTER_REPORT = """
import multiprocessing as mp
from helpers import environment
print(environment.format_report().count("default start method"))
environment.default_context()
mp.set_start_method("spawn")   # raises "context has already been set" if the report had fixed it
print(mp.get_start_method())
"""


def test_set_start_method_still_works_after_the_report():
    """The report (notebook 00's first cell) must not fix the kernel's start method: 06 teaches that pitfall."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _AFTER_REPORT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "spawn"]


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
