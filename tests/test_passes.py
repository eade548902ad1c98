"""Unit tests of tests/passes.py, the runner of `make test`: its scheduler starts no more jobs than
allowed, reports each one, leaves none running when something goes wrong, and adds up pytest's counts."""

import importlib.util
import itertools
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

_spec = importlib.util.spec_from_file_location("passes", Path(__file__).with_name("passes.py"))
passes = sys.modules.setdefault("passes", importlib.util.module_from_spec(_spec))  # dataclasses look it up
_spec.loader.exec_module(passes)


def _job(tmp_path, name, code):
    return passes.Job(name, [sys.executable, "-c", code], {}, tmp_path / f"{name}.log")


def test_run_jobs_keeps_the_limit_and_reports_every_job(tmp_path):
    stamp = "import sys, time; print(time.time()); time.sleep(0.5); print(time.time()); sys.exit({})"
    jobs = [_job(tmp_path, f"j{i}", stamp.format(i)) for i in range(3)]
    seen = []
    passes.run_jobs(jobs, 2, lambda job, code, secs, cpu: seen.append((job.name, code, job.log.read_text().split())))
    assert sorted(name for name, _, _ in seen) == ["j0", "j1", "j2"]
    assert {name: code for name, code, _ in seen} == {"j0": 0, "j1": 1, "j2": 2}
    spans = sorted((float(a), float(b)) for _, _, (a, b) in seen)
    assert spans[2][0] >= min(spans[0][1], spans[1][1]) - 0.05  # the third started after one had ended


def test_run_jobs_reports_each_jobs_own_cpu_time_with_its_children(tmp_path):
    busy = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'sum(range(30_000_000))'], check=True)"
    jobs = [_job(tmp_path, "busy child", busy), _job(tmp_path, "sleeper", "import time; time.sleep(1)")]
    cpu = {}
    passes.run_jobs(jobs, 2, lambda job, code, secs, used: cpu.update({job.name: (used, secs)}))
    used, seconds = cpu["busy child"]
    assert used > 0.3  # the grandchild's loop, counted through the job that waited for it
    assert cpu["sleeper"][0] < 0.3 < used


def test_run_jobs_adds_a_job_beside_a_running_one_only_when_may_add_says_so(tmp_path):
    stamp = "import time; print(time.time()); time.sleep(0.3); print(time.time())"
    asked = []

    def never(since_last_start):
        asked.append(since_last_start)
        return False

    jobs = [_job(tmp_path, f"j{i}", stamp) for i in range(3)]
    seen = []
    passes.run_jobs(jobs, 3, lambda job, code, secs, cpu: seen.append(job.log.read_text().split()), may_add=never)
    spans = sorted((float(a), float(b)) for a, b in seen)
    assert len(spans) == 3 and asked  # asked while one ran, and refused
    assert all(later[0] >= earlier[1] - 0.05 for earlier, later in itertools.pairwise(spans))  # one at a time
    seen.clear()
    passes.run_jobs(jobs, 3, lambda job, *_: seen.append(job.log.read_text().split()), may_add=lambda s: True)
    starts = sorted(float(a) for a, _ in seen)
    assert starts[2] - starts[0] < 0.3  # all three side by side


def test_idle_meter_reads_the_idle_share_of_its_last_window_and_waits_after_a_start():
    from collections import namedtuple

    Times = namedtuple("Times", "user idle iowait")
    # (clock, user seconds, idle seconds) at each reading, for a window of 5 s
    readings = iter([(0, 0, 0), (3, 3, 3), (5, 5, 5), (10, 14, 6), (15, 15, 15), (16, 16, 15)])
    now = [0.0]

    def cpu_times():
        clock, user, idle = next(readings)
        now[0] = clock
        return Times(user, idle, 0.0)

    meter = passes.IdleMeter(share=0.3, window=5.0, cpu_times=cpu_times, clock=lambda: now[0])
    assert meter.idle_share() is None  # one reading: no window yet
    assert meter.idle_share() is None  # 3 s of the 5 s window
    assert meter.idle_share() == pytest.approx(0.5)  # 5 of 10 CPU seconds idle since 0
    assert meter(since_last_start=9.0) is False  # since 5: 1 of 10 idle
    assert meter(since_last_start=9.0) is True  # since 10: 9 of 10 idle
    assert meter(since_last_start=1.0) is False  # idle, but a job started 1 s ago: its start-up is not seen yet


def test_run_jobs_leaves_nothing_running_when_a_report_fails(tmp_path):
    jobs = [_job(tmp_path, "quick", "pass"), _job(tmp_path, "slow", "import time; time.sleep(60)")]

    def finished(job, code, seconds, cpu):
        raise RuntimeError("the report failed")

    def alive_children():
        return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}

    before = alive_children()  # e.g. a forkserver another test in this session started
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the report failed"):
        passes.run_jobs(jobs, 2, finished)
    assert time.monotonic() - started < 30
    assert alive_children() - before == set()


def test_one_job_that_waits_runs_beside_the_others_even_when_may_add_refuses(tmp_path):
    stamp = "import time; print(time.time()); time.sleep(0.4); print(time.time())"
    jobs = [_job(tmp_path, "busy0", stamp), _job(tmp_path, "busy1", stamp)]
    jobs += [passes.Job(f"wait{i}", jobs[0].cmd, {}, tmp_path / f"wait{i}.log", waits=True) for i in range(2)]
    spans = {}
    passes.run_jobs(
        jobs, 3, lambda job, *_: spans.update({job.name: [float(t) for t in job.log.read_text().split()]}),
        may_add=lambda since: False,
    )  # fmt: skip
    assert spans["wait0"][0] < spans["busy0"][1] - 0.1  # the first waiting job ran beside the first busy one
    assert spans["wait1"][0] >= spans["wait0"][1] - 0.05  # never two waiting jobs at once
    assert spans["busy1"][0] >= spans["busy0"][1] - 0.05  # and the busy ones one at a time, as may_add said


def test_a_job_that_computes_starts_when_only_a_waiting_one_is_left_running(tmp_path):
    stamp = "import time, sys; print(time.time()); time.sleep(float(sys.argv[1])); print(time.time())"
    jobs = [
        passes.Job("busy0", [sys.executable, "-c", stamp, "0.2"], {}, tmp_path / "busy0.log"),
        passes.Job("wait0", [sys.executable, "-c", stamp, "4"], {}, tmp_path / "wait0.log", waits=True),
        passes.Job("busy1", [sys.executable, "-c", stamp, "0.2"], {}, tmp_path / "busy1.log"),
    ]
    spans = {}
    passes.run_jobs(
        jobs, 3, lambda job, *_: spans.update({job.name: [float(t) for t in job.log.read_text().split()]}),
        may_add=lambda since: False,
    )  # fmt: skip
    assert spans["busy1"][0] >= spans["busy0"][1] - 0.05  # the busy ones one at a time, as may_add said
    assert spans["busy1"][0] < spans["wait0"][1] - 0.3  # but busy1 did not wait for the waiting job's end


def test_the_waiting_files_exist_and_each_runs_alone():
    files = sorted(Path(__file__).parent.glob("test_*.py"))
    assert set(passes.WAITING) <= {f.name for f in files}
    assert not set(passes.WAITING) & set(passes.SHARED_PROCESS)


def test_counts_add_up_every_pytest_summary():
    log = "==== 3 passed, 1 failed in 2.0s ====\n...\n==== 2 passed, 1 skipped in 1.0s ====\n"
    assert passes._counts(log) == {"passed": 5, "failed": 1, "skipped": 1}


def test_unit_groups_share_one_process_for_the_light_files_only():
    files = sorted(Path(__file__).parent.glob("test_*.py"))
    groups = passes.unit_groups(files)
    shared = [g for g in groups if len(g) > 1]
    assert len(shared) == 1 and {f.name for f in shared[0]} == set(passes.SHARED_PROCESS)
    assert sorted(f for g in groups for f in g) == files  # every file once
    assert all(len(g) == 1 for g in groups if g is not shared[0])


def test_unit_processes_run_without_nbval_and_keep_the_other_options(tmp_path):
    options = passes.without_nbval()
    assert options[:4] == ["-p", "no:nbval", "-p", "no:anyio"] and "--nbval" not in options[-1]
    assert "-p no:cacheprovider" in options[-1]  # the rest of pyproject.toml's addopts still applies
    # The repository's pyproject.toml and conftest.py, as the unit pass uses them, on a probe test in the
    # git-ignored build/ folder: the options parse, and neither plugin is ever imported.
    folder = passes.ROOT / "build" / f"nbval_free_probe_{tmp_path.name}"
    folder.mkdir(parents=True)
    try:
        (folder / "test_probe.py").write_text(
            "import sys\n\ndef test_probe():\n"
            "    assert not any(m.split('.')[0] in ('nbval', 'anyio') for m in sys.modules)\n"
        )
        run = subprocess.run(
            [sys.executable, "-m", "pytest", *options, "-q", str(folder / "test_probe.py")],
            cwd=passes.ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    finally:
        shutil.rmtree(folder)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
