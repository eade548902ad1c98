"""The deadlines of the diagnose tests follow the machine's load (tests/machine_speed.py)."""

from __future__ import annotations

import subprocess
import sys

import machine_speed
import pytest

from helpers.environment import usable_cores

_SPIN = "while True: pass"


def test_a_machine_kept_busy_reads_slower_than_one_core_per_process() -> None:
    # two busy processes per usable core and the probe: each gets at most a third of a core, whatever else
    # runs here, so the spin alone reads 3 or more; 1.5 leaves room for the scheduler's unfairness
    spinners = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(2 * usable_cores())]
    try:
        assert machine_speed.slowdown(0.5) >= 1.5
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def test_the_deadline_scales_the_import_time_by_the_load_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine_speed, "_import_torch", lambda: (2.0, 2.0))  # 2 s of wall, 2 s of CPU: idle
    monkeypatch.setattr(machine_speed, "slowdown", lambda seconds=0.2: 3.0)
    assert machine_speed.torch_deadline(2) == 2 * 2.0 * 3.0 + 2.0


def test_the_deadline_is_never_shorter_than_the_import_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine_speed, "_import_torch", lambda: (6.0, 2.0))  # 6 s on a machine 3 times slower
    monkeypatch.setattr(machine_speed, "slowdown", lambda seconds=0.2: 1.0)  # idle now: 2 s would do
    assert machine_speed.torch_deadline(2) == 2 * 6.0 + 2.0


@pytest.mark.parametrize("factor", [0, -1, "3", True, None])
def test_a_factor_that_is_not_a_positive_number_is_refused(factor: object) -> None:
    with pytest.raises(ValueError, match="factor must be a positive number"):
        machine_speed.torch_deadline(factor)  # type: ignore[arg-type]


def test_a_hang_script_must_outlast_any_deadline() -> None:
    source = (
        "import datetime, time\n"
        "a = datetime.timedelta(seconds=60)\n"  # too short: the group times out before a stretched deadline
        "b = datetime.timedelta(minutes=30)\n"
        "time.sleep(5)\n"  # part of the bug (rank 0's evaluation)
        "time.sleep(600)\n"  # too short
        "OTHER = 'time.sleep(30)'\n"  # in a string: another program's, not read
    )
    assert machine_speed.literal_durations(source) == [(2, 60.0), (3, 1800.0), (4, 5.0), (5, 600.0)]
    assert machine_speed.too_short_for_a_hang(source) == [(2, 60.0), (5, 600.0)]
