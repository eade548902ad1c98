import subprocess
import sys
import time

import pytest

from helpers import timing


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_own_work_does_not_count_as_load(monkeypatch):
    """With the machine's busy time made equal to our own tree's, what is left for 'others' is nothing,
    however long we spin (the real machine is shared, so its busy time cannot be asserted on)."""
    monkeypatch.setattr(timing, "_busy_core_seconds", timing.tree_cpu)
    with timing.measure_load(probe=0.1) as meter:
        _spin(0.5)
    load = meter.result
    assert load is not None and load.seconds >= 0.5
    # one clock tick (10 ms) may pass between the two reads of a snapshot: 0.1 cores over the 0.1 s probe
    assert load.before < 0.25 and load.during < 0.1 and not load.disturbed


def test_others_are_the_machine_minus_our_tree(monkeypatch):
    t0 = time.monotonic()
    monkeypatch.setattr(timing, "_busy_core_seconds", lambda: timing.tree_cpu() + (time.monotonic() - t0))
    with timing.measure_load(probe=0) as meter:
        _spin(0.3)
    assert 0.8 < meter.result.during < 1.2  # one other core's worth, our own spinning left out


_MEASURE = """
import time
from helpers import timing
with timing.measure_load(probe=0.3) as meter:
    time.sleep(1.0)
print(meter.result.before, meter.result.during)
"""


def test_a_busy_loop_outside_the_measuring_tree_is_seen():
    """A sibling process spinning on one core is 'other programs' to a process measuring its own run."""
    code = "import time\nt = time.monotonic() + 4\nwhile time.monotonic() < t: pass"
    busy = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.2)
        done = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True, timeout=60)
        before, during = map(float, done.stdout.split())
        assert before > 0.6 and during > 0.6, done.stdout
    finally:
        busy.kill()
        busy.wait()


def test_load_summary_and_dict():
    quiet = timing.Load(before=0.0, during=0.1, cores=2, seconds=1.0)
    busy = timing.Load(before=1.0, during=1.9, cores=2, seconds=1.0)
    assert not quiet.disturbed and busy.disturbed
    assert "undisturbed" in quiet.summary() and "disturbed" in busy.summary()
    assert busy.as_dict()["disturbed"] is True


@pytest.mark.parametrize(
    ("ratio", "expected"),
    [
        (2.5, "Above the physical limit"),
        (1.8, "Close to the limit"),
        (1.3, "A real gain"),
        (1.0, "No gain"),
        (0.5, "Slower"),
    ],
)
def test_read_ratio_readings(ratio, expected):
    assert expected in timing.read_ratio("2 processes", ratio, 2)


def test_read_ratio_without_a_limit_names_no_limit():
    text = timing.read_ratio("spawn / fork", 90.0, None)
    assert text == "spawn / fork: 90.00x. A real gain."


def test_read_ratio_rounds_a_computed_limit():
    assert timing.read_ratio("best", 2.64, 17.6539).startswith("best: 2.64x of a possible 17.7x.")


def test_read_ratio_names_the_load_when_disturbed():
    busy = timing.Load(before=1.0, during=1.2, cores=2, seconds=1.0)
    text = timing.read_ratio("2 processes", 1.1, 2, busy)
    assert text.startswith("2 processes: 1.10x of a possible 2x.")
    assert "other programs used 1.2 of 2 cores" in text


def test_bad_arguments():
    with pytest.raises(ValueError, match="ratio"):
        timing.read_ratio("x", float("nan"), 2)
    with pytest.raises(ValueError, match="limit"):
        timing.read_ratio("x", 1.0, 0)
    with pytest.raises(TypeError, match="label"):
        timing.read_ratio(3, 1.0, 2)
    with pytest.raises(ValueError, match="probe"):
        timing.measure_load(probe=-1)
    with pytest.raises(ValueError, match="seconds"):
        timing.other_cpu(0)
    with pytest.raises(ValueError, match="at least one"):
        timing.spread([])


def test_spread():
    s = timing.spread([3.0, 1.0, 2.0])
    assert (s.median, s.low, s.high, s.n) == (2.0, 1.0, 3.0, 3)
    assert "over 3 runs" in str(s)


def test_tree_cpu_counts_a_reaped_child_and_reads_an_ended_process_as_nothing():
    before = timing.tree_cpu()
    spin = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end:\n    pass"
    subprocess.run([sys.executable, "-c", spin], check=True)  # waited for: its CPU moves to ours
    assert timing.tree_cpu() - before >= 0.3
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert timing.tree_cpu(ended.pid) == 0.0


def test_a_run_disturbed_only_just_before_says_so():
    """The probe before the run can decide 'disturbed' alone: the reading must show that probe's figure."""
    load = timing.Load(before=0.9, during=0.0, cores=2, seconds=1.0)
    assert "used 0.0 of 2 cores during the run (0.9 just before)" in timing.read_ratio("x", 1.3, 2.0, load)


def test_every_reading_names_the_load_in_the_same_words():
    """One phrase for the load, made by `Load.others`: the summary, a ratio's reading, the bench's figure
    (which keeps its load as a dict) and 09's bubble reading must not drift apart."""
    from helpers import bench
    from helpers import model_parallel as mpar

    load = timing.Load(before=0.9, during=0.2, cores=2, seconds=1.0)
    phrase = "other programs used 0.2 of 2 cores during the run (0.9 just before)"
    assert load.others() == phrase
    assert timing.Load.from_dict(load.as_dict()) == load
    figure = bench.Figure(ratio=1.6, limit=2.0, what="fake", floor=1.5, load=load.as_dict())
    readings = [
        load.summary(),
        timing.read_ratio("x", 1.3, 2.0, load),
        figure.reading(),
        mpar.bubble_reading(0.5, 2, 4, load=load),
    ]
    assert all(phrase in text for text in readings), readings
