import itertools
import json
import os
import statistics

import pytest

from helpers import bench, timing
from helpers.environment import usable_cores


def test_figures_are_ratios_with_limits():
    fig = bench.threads_vs_processes(n=20_000, rounds=3)
    details = fig.details
    assert fig.ratio > 0 and fig.floor == pytest.approx(0.8 * usable_cores())
    assert fig.meets_floor in (True, False)
    assert {"threads_s", "processes_s", "process_startup_s", "start_method"} <= set(details)
    assert details["ratio_low"] <= fig.ratio <= details["ratio_high"] and details["rounds"] == 3
    # the limit is time on threads over one piece alone, each round's own: near threads_s / one_worker_s
    assert fig.limit > 0 and "one piece alone" in fig.what


def test_spawn_vs_fork_start_is_measured():
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork here")
    fig = bench.spawn_vs_fork_start(repeats=1)
    assert fig.ratio > 1 and fig.limit is None and fig.meets_floor is None
    assert fig.details["spawn_s"] > fig.details["fork_s"] > 0


def test_json_output(monkeypatch, capsys):
    monkeypatch.setitem(bench.FIGURES, "threads_vs_processes", lambda: bench.threads_vs_processes(20_000, 1))
    assert bench.main(["threads_vs_processes", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    figure = payload["threads_vs_processes"]
    assert {"ratio", "limit", "what", "floor", "meets_floor"} <= set(figure)


def test_table_and_list(monkeypatch, capsys):
    fake = bench.Figure(ratio=1.0, limit=2.0, what="a fake figure", floor=1.5, details={"x_s": 0.5})
    monkeypatch.setattr(bench, "FIGURES", {"fake": lambda: fake})
    monkeypatch.setattr(bench, "cores_given", lambda: 2.0)  # a miss is measured three times; no need to probe
    monkeypatch.setattr(bench, "core_speeds", lambda: None)
    assert bench.main(["--check"]) == 1  # below its floor
    out = capsys.readouterr().out
    assert "fake" in out and "NO" in out and "x_s=0.500" in out
    assert bench.main(["--list"]) == 0


def test_unknown_figure_is_an_error(capsys):
    with pytest.raises(SystemExit) as info:
        bench.main(["no_such_figure"])
    assert info.value.code == 2
    assert "unknown figure" in capsys.readouterr().err


def test_conditions_count_towards_the_floor():
    fig = bench.Figure(ratio=3.0, limit=2.0, what="w", floor=1.5, conditions={"accuracy kept": False})
    assert fig.meets_floor is False
    assert bench.Figure(ratio=3.0, limit=2.0, what="w", conditions={"ok": True}).meets_floor is True


def test_hogwild_speedup_reports_both_accuracies():
    fig = bench.hogwild_speedup(steps=300)
    assert fig.ratio > 0 and fig.floor == pytest.approx(0.75 * fig.limit)
    assert "accuracy within 2 points of single process" in fig.conditions
    assert {"accuracy_single_pct", "samples_per_s_single", "start_method"} <= set(fig.details)
    if hasattr(os, "sched_setaffinity"):  # the baseline ran on each core and the fastest counts
        per_core = {f"samples_per_s_single_core_{core}" for core in os.sched_getaffinity(0)}
        assert per_core <= set(fig.details) and "on the fastest core" in fig.what


def test_pool_chunksize_figure_names_the_default_and_its_floor():
    fig = bench.pool_chunksize(tasks=2000, workers=2, repeats=1)
    assert fig.floor == 10.0 and fig.limit is None and fig.ratio > 0
    assert fig.details["default_chunksize"] == 250 and "chunksize=250" in fig.what
    assert {"chunksize_1_s", "default_s", "chunksize_1000_s", "pool_startup_s", "start_method"} <= set(fig.details)


def test_pool_io_scaling_figure_reports_startup_and_the_cpu_bound_case():
    fig = bench.pool_io_scaling(tasks=16, delay=0.01, workers=2)
    assert fig.floor == 6.0 and fig.limit == 2.0 and fig.ratio > 0
    assert {"pool_startup_s_1", "pool_startup_s_2", "cpu_bound_ratio_2", "start_method"} <= set(fig.details)


def test_dataloader_io_reads_its_ratio_against_the_workers_loading_without_a_pause():
    fig = bench.dataloader_io(workers=2, delay=0.005)
    assert 0 < fig.ratio <= fig.limit and fig.floor == 6.0
    assert {"samples_per_s_0", "samples_per_s_2", "unpaused_samples_per_s_2", "startup_s_2"} <= set(fig.details)
    # The limit is the workers' unpaused rate over the baseline's. On an idle machine that is the worker count
    # within 1 % (the bench's runs: 8.01-8.05 of 8), but not here: make test runs the notebook passes beside
    # this file, and a sleep's wake-up waits for a core by as much as the load of that second (run av: a limit
    # of 3.15 of 2 workers, the baseline's samples 1.58 times as long as the workers'). A count of cores is
    # the bench's to read, where the load is reported beside it; this test checks how the limit is made.
    details = fig.details
    assert fig.limit == pytest.approx(details["unpaused_samples_per_s_2"] / details["samples_per_s_0"])
    assert details["samples_per_s_2"] <= details["unpaused_samples_per_s_2"]


def test_pool_figures_are_registered():
    assert bench.FIGURES["pool_chunksize"] is bench.pool_chunksize
    assert bench.FIGURES["pool_io_scaling"] is bench.pool_io_scaling


def test_ddp_speedup_figure_reports_the_threaded_baseline():
    fig = bench.ddp_speedup(batch=16, width=16, depth=1, steps=2, rounds=3)
    assert fig.ratio > 0 and fig.floor == pytest.approx(0.7 * fig.limit)
    assert fig.details["ratio_low"] <= fig.ratio <= fig.details["ratio_high"]
    cores = usable_cores()
    assert {"samples_per_s_single", f"samples_per_s_ddp_{cores}", f"startup_s_ddp_{cores}", "start_method"} <= set(
        fig.details
    )
    assert f"samples_per_s_single_{cores}_threads" in fig.details


def test_ddp_speedup_limit_is_the_ranks_times_the_slowest_core(monkeypatch):
    """Every rank waits for the slowest at each all-reduce: with one of 2 cores at 0.6 of the other around a
    round, that round's limit is 2 x 0.6, and the figure's the median round's."""
    from helpers import distributed

    if usable_cores() != 2:
        pytest.skip("the probes below describe 2 cores")
    run = distributed.TrainRun(1, 1, [100.0, 100.0], 0.0, timing.Load(0.0, 0.0, 2, 1.0))
    ddp = distributed.TrainRun(2, 1, [150.0, 170.0], 0.0, timing.Load(0.0, 0.0, 2, 1.0))
    probes = [[1.0, 0.6], [1.0, 0.6], [0.9, 1.0]]  # rounds' limits 1.2 and 1.8 (the higher probe)
    measured = distributed.WeakScaling(run, ddp, probes)
    monkeypatch.setattr(distributed, "weak_scaling", lambda *a, **k: measured)
    monkeypatch.setattr(distributed, "ddp_throughput", lambda *a, **k: run)
    fig = bench.ddp_speedup(rounds=2)
    assert fig.ratio == pytest.approx(1.6) and fig.limit == pytest.approx(1.5) and fig.floor == pytest.approx(1.05)
    assert fig.details["core_speeds_probed"] == probes and "fastest core" in fig.what
    unpinned = distributed.WeakScaling(run, ddp, [])  # nothing could be pinned
    monkeypatch.setattr(distributed, "weak_scaling", lambda *a, **k: unpinned)
    fig = bench.ddp_speedup(rounds=2)
    assert fig.limit == 2.0 and "fastest core" not in fig.what


def test_ring_allreduce_figure_has_no_floor():
    fig = bench.ring_allreduce(nbytes=4096, repeats=1)
    assert fig.ratio > 0 and fig.floor is None and fig.limit is None and fig.meets_floor is None
    assert {"ring_ms", "all_reduce_ms", "start_method"} <= set(fig.details)


def test_distributed_figures_are_registered():
    assert bench.FIGURES["ddp_speedup"] is bench.ddp_speedup
    assert bench.FIGURES["ring_allreduce"] is bench.ring_allreduce


def test_a_figure_that_cannot_be_measured_is_reported_not_fatal(monkeypatch, capsys):
    def too_slow() -> bench.Figure:
        """A figure whose workers miss their budget. More text."""
        raise TimeoutError("a worker was still running after 60 s (/tmp/x 1234)")

    fake = bench.Figure(ratio=1.9, limit=2.0, what="fine", floor=1.5)
    monkeypatch.setattr(bench, "FIGURES", {"slow": too_slow, "fine": lambda: fake})
    assert bench.main(["--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["slow"]["ratio"] is None and payload["slow"]["measured"] is False
    assert payload["slow"]["reason"].startswith("TimeoutError: a worker was still running after 60 s")
    assert payload["slow"]["what"] == "A figure whose workers miss their budget"
    assert payload["fine"]["measured"] is True and payload["fine"]["meets_floor"] is True
    assert payload["_run"]["not_measured"] == ["slow"]
    assert {"other_cores_during", "disturbed", "usable_cores"} <= set(payload["fine"]["load"])
    assert bench.main(["--check"]) == 1  # a figure that could not be measured fails --check
    out = capsys.readouterr().out
    assert "not measured: TimeoutError" in out and "n/a" in out


def test_measure_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown figure"):
        bench.measure("nope")


def test_a_disturbed_figure_says_so(monkeypatch, capsys):
    fake = bench.Figure(ratio=1.1, limit=2.0, what="fake", floor=1.5)
    monkeypatch.setattr(bench, "FIGURES", {"fake": lambda: fake})
    busy = timing.Load(before=1.0, during=1.0, cores=2, seconds=1.0)
    monkeypatch.setattr(timing.measure_load, "__exit__", lambda self, *a: setattr(self, "result", busy))
    monkeypatch.setattr(bench, "measure_load", lambda: timing.measure_load(probe=0))
    monkeypatch.setattr(bench, "cores_given", lambda: 1.2)
    monkeypatch.setattr(bench, "core_speeds", lambda: None)
    assert bench.main([]) == 0
    captured = capsys.readouterr()
    assert (
        "1.0 busy" in captured.out
        and "Disturbed: other programs used 1.0 of 2 cores during the run (1.0 just before)" in captured.out
    )
    assert "the machine was busy during fake" in captured.err


def test_a_figure_disturbed_only_before_names_that_probe():
    """The probe just before can decide 'disturbed' alone: the reading must not then say 0.0 cores were used."""
    load = timing.Load(before=0.9, during=0.0, cores=2, seconds=1.0).as_dict()
    fig = bench.Figure(ratio=1.6, limit=2.0, what="fake", floor=1.5, load=load)
    assert "used 0.0 of 2 cores during the run (0.9 just before)" in fig.reading()
    assert "0.9 busy" in bench._table({"fake": fig})


@pytest.mark.parametrize(
    ("ratio", "floor", "expected"),
    [
        (143.9, None, "ratio: 144x (no physical limit, no floor"),
        (390.0, 50.0, "ratio: 390x (no physical limit), at or above its floor of 50x."),
        (20.0, 50.0, "ratio: 20x (no physical limit), below its floor of 50x."),
    ],
)
def test_a_figure_without_a_limit_is_not_read_as_a_speed_up(ratio, floor, expected):
    # spawn / fork start-up, a restart's cost, the ring's time over gloo's: "a real gain" would be wrong
    text = bench.Figure(ratio=ratio, limit=None, what="a cost", floor=floor).reading()
    assert text.startswith(expected) and "gain" not in text


def test_dataloader_cpu_reads_each_round_against_the_cores_speeds_around_it():
    fig = bench.dataloader_cpu(work=200, batch_size=2, batches=4, rounds=3)
    base, best = fig.details["rounds_0"], fig.details["rounds_best"]
    assert len(base) == len(best) == 3 and fig.details["samples_per_s_0"] in base
    assert fig.ratio == statistics.median(b / z for b, z in zip(best, base, strict=True))
    assert fig.details["ratio_low"] <= fig.ratio <= fig.details["ratio_high"]
    assert fig.floor == pytest.approx(0.75 * fig.limit)
    probes = fig.details["core_speeds_probed"]
    if timing.core_speeds() is None:  # no pinning (macOS, Windows): the core count
        assert probes == [] and fig.limit == usable_cores()
    else:  # one probe before each round and one after the last; each round between two
        capacity = [sum(speeds) for speeds in probes]
        assert len(probes) == 4 and all(max(speeds) == 1.0 for speeds in probes)
        assert fig.limit == statistics.median(max(a, b) for a, b in itertools.pairwise(capacity))
        assert 1.0 <= fig.limit <= usable_cores() and "fastest core" in fig.what


def test_fsdp_state_bytes_figure_counts_half_the_state_per_rank():
    fig = bench.FIGURES["fsdp_state_bytes"](steps=1)
    assert fig.limit == 2.0 and fig.floor == 1.9 and fig.floor <= fig.ratio <= fig.limit
    assert fig.meets_floor is True and fig.conditions == {"FSDP2 weights bitwise equal to DDP's": True}
    assert fig.details["ddp_bytes_per_rank"] > fig.details["zero1_bytes_per_rank"] > fig.details["fsdp_bytes_per_rank"]


def test_pipeline_speedup_figure_has_the_pipeline_limit():
    fig = bench.FIGURES["pipeline_speedup"](microbatches=2, repeats=1, layers=2)
    bubble = 2 * 2 / 3
    probes = fig.details["core_speeds_probed"]
    assert fig.details["bubble_limit"] == pytest.approx(bubble)
    if usable_cores() == 2 and probes:  # one probe before the step, one after: the limit is the higher pace
        assert len(probes) == 2 and all(max(speeds) == 1.0 for speeds in probes)
        assert fig.limit == pytest.approx(max(bubble * min(speeds) for speeds in probes))
        assert "fastest core" in fig.what
    else:
        assert fig.limit == pytest.approx(bubble)
    assert fig.floor == pytest.approx(0.7 * fig.limit) and fig.ratio > 0
    assert {"pipeline_s", "single_s", "single_all_threads_s", "faster", "microbatches", "bubble_formula"} <= set(
        fig.details
    )
    assert fig.details["layers"] == 2
    for bad in (3, 0):
        with pytest.raises(ValueError, match="layers"):
            bench.FIGURES["pipeline_speedup"](layers=bad)


def test_pipeline_speedup_limit_is_the_bubbles_times_the_slower_core(monkeypatch):
    """The stages run in step: with one of 2 cores at 0.6 of the other around a step, that step's limit is the
    bubble's (2 m / (m + 1)) x 0.6, and the figure's the median step's; nothing probed: the bubble's alone."""
    from helpers import model_parallel

    if usable_cores() != 2:
        pytest.skip("the probes below describe 2 cores")
    probes = [[1.0, 0.6], [1.0, 0.6], [0.9, 1.0]]  # steps' paces 0.6 and 0.9 of the bubble's limit (the higher probe)

    def fake_launch(speeds):
        timing_ = {"pipeline": [1.0, 1.0], "single": [1.5, 1.5], "core_speeds": speeds}
        return lambda *a, **k: {0: {"pipeline_timing": timing_}, 1: {"pipeline_timing": {"pipeline": [1.0, 1.0]}}}

    monkeypatch.setattr(model_parallel, "_time_single", lambda *a, **k: [1.0])
    monkeypatch.setattr(model_parallel, "launch", fake_launch(probes))
    fig = model_parallel.pipeline_speedup(microbatches=8, repeats=2)
    bubble = 16 / 9
    assert fig.ratio == pytest.approx(1.5) and fig.limit == pytest.approx(bubble * 0.75)
    assert fig.floor == pytest.approx(0.7 * bubble * 0.75) and "fastest core" in fig.what
    monkeypatch.setattr(model_parallel, "launch", fake_launch([]))  # nothing could be pinned
    fig = model_parallel.pipeline_speedup(microbatches=8, repeats=2)
    assert fig.limit == pytest.approx(bubble) and "fastest core" not in fig.what


def test_chapter_09_figures_are_registered():
    from helpers import model_parallel

    assert bench.FIGURES["fsdp_state_bytes"] is model_parallel.fsdp_state_bytes
    assert bench.FIGURES["pipeline_speedup"] is model_parallel.pipeline_speedup


def test_a_counted_figure_is_never_called_disturbed():
    """Bytes and collectives do not depend on the machine's load: a busy machine must not be blamed."""
    busy = timing.Load(before=1.9, during=1.9, cores=2, seconds=1.0).as_dict()
    counted = bench.Figure(ratio=1.0, limit=1.0, what="counted", load=busy, timed=False)
    timed = bench.Figure(ratio=1.0, limit=2.0, what="timed", load=busy)
    assert "Disturbed" not in counted.reading() and "Disturbed" in timed.reading()
    assert not counted.disturbed and timed.disturbed
    rows = bench._table({"counted": counted, "timed": timed, "unprobed": bench.Figure(1.0, 1.0, "no load")})
    loads = {line.split()[0]: line.split()[5] for line in rows.splitlines()[1:4]}
    assert loads == {"counted": "1.9", "timed": "1.9", "unprobed": "-"}
    assert "1.9 busy" in rows and "1.9 busy" not in rows.split("\n")[1]


def test_the_chapter_10_figures_are_registered():
    assert {"sim_over_real_bytes", "allreduce_model"} <= set(bench.FIGURES)


def test_a_figure_under_its_floor_is_measured_three_times_and_the_median_counts(monkeypatch, capsys):
    readings = iter([1.2, 1.9, 1.1, 1.0, 1.95, 1.96])
    monkeypatch.setattr(
        bench, "FIGURES", {"fake": lambda: bench.Figure(ratio=next(readings), limit=2.0, what="fake", floor=1.5)}
    )
    monkeypatch.setattr(bench, "cores_given", lambda: 1.5)
    speeds = iter([[1.0, 0.62], [0.7, 1.0], [1.0, 1.0], None, None, None])
    monkeypatch.setattr(bench, "core_speeds", lambda: next(speeds))
    notes: list[str] = []
    fig = bench.measure_all(["fake"], note=notes.append)["fake"]  # 1.2, 1.9, 1.1: the median misses
    assert fig.ratio == 1.2 and fig.meets_floor is False
    assert fig.details["attempts"] == [
        {"ratio": 1.2, "cores_given": 1.5, "core_speeds": [1.0, 0.62]},
        {"ratio": 1.9, "cores_given": 1.5, "core_speeds": [0.7, 1.0]},
        {"ratio": 1.1, "cores_given": 1.5, "core_speeds": [1.0, 1.0]},
    ]
    assert notes[0].startswith("helpers.bench: fake read 1.20, under its floor of 1.5; the machine gives 1.50 of")
    assert "cores now (each core against the fastest: 1.00, 0.62); it is measured 2 more times after" in notes[0]
    assert notes[1] == "helpers.bench: fake read 1.20, 1.90, 1.10; the median counts"
    fig = bench.measure_all(["fake"], note=notes.append)["fake"]  # 1.0, 1.95, 1.96: the median holds
    assert fig.ratio == 1.95 and fig.meets_floor is True
    # where cores cannot be probed one by one (macOS, Windows), the attempts and the note say nothing of them
    assert fig.details["attempts"] == [{"ratio": r, "cores_given": 1.5} for r in (1.0, 1.95, 1.96)]
    assert "cores now; it is measured 2 more times" in notes[2]


def test_a_miss_is_measured_again_after_the_other_figures_in_turns(monkeypatch):
    # retried at once, a figure stays inside the slow spell that made it miss (1.55, 2.04, 1.53 seen)
    calls: list[str] = []
    readings = {"a": iter([1.0, 1.9, 1.8]), "b": iter([1.1, 1.2, 1.3])}

    def figure(name: str) -> bench.Figure:
        calls.append(name)
        ratio = next(readings[name]) if name in readings else 1.9
        return bench.Figure(ratio=ratio, limit=2.0, what=name, floor=1.5)

    monkeypatch.setattr(bench, "FIGURES", {name: (lambda n=name: figure(n)) for name in ("a", "b", "c")})
    monkeypatch.setattr(bench, "cores_given", lambda: 2.0)
    monkeypatch.setattr(bench, "core_speeds", lambda: None)
    results = bench.measure_all(["a", "b", "c"], note=lambda text: None)
    assert calls == ["a", "b", "c", "a", "b", "a", "b"]
    assert (results["a"].ratio, results["a"].meets_floor) == (1.8, True)
    assert (results["b"].ratio, results["b"].meets_floor) == (1.2, False)
    assert "attempts" not in results["c"].details


def test_a_figure_at_its_floor_or_counted_is_measured_once(monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "cores_given", lambda: pytest.fail("probed without a miss"))
    monkeypatch.setattr(bench, "core_speeds", lambda: pytest.fail("cores probed without a miss"))
    monkeypatch.setattr(
        bench,
        "FIGURES",
        {
            "fine": lambda: calls.append(1) or bench.Figure(ratio=1.9, limit=2.0, what="fine", floor=1.5),
            "counted": lambda: calls.append(1) or bench.Figure(ratio=0.5, limit=1, what="c", floor=0.9, timed=False),
        },
    )
    results = bench.measure_all(["fine", "counted"])
    assert "attempts" not in results["fine"].details
    assert results["counted"].meets_floor is False and len(calls) == 2


def test_cores_given_reads_the_time_alone_against_the_slowest_together():
    # the probe's own value is a timing, checked only for being one: clean run p (one core kept busy) read
    # 3.05 on 2 cores, the loop alone slowed by the others more than the loops together
    given = timing.cores_given(count=200_000, trials=3)
    assert 0 < given < float("inf")
    assert timing._cores_from([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], cores=2) == 2.0  # noqa: SLF001 - the reading
    assert timing._cores_from([1.0, 9.0, 1.0], [2.0, 2.0, 0.5], cores=2) == 1.0  # noqa: SLF001 - medians
    assert timing._cores_from([1.0, 1.0, 1.0], [4.0, 4.0, 4.0], cores=4) == 1.0  # noqa: SLF001


def test_core_speeds_reads_each_core_against_the_fastest_and_unpins():
    # each core's value is a timing, checked only for its shape; the reading is checked exactly
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    speeds = timing.core_speeds(count=50_000, trials=1)
    if before is None:
        assert speeds is None
    else:
        assert len(speeds) == len(before) and max(speeds) == 1.0 and all(0 < s <= 1.0 for s in speeds)
        assert os.sched_getaffinity(0) == before  # the probe pinned this process one core at a time
    assert timing._speeds_from({0: [10.0, 11.0, 10.0], 1: [16.0, 16.5, 17.0]}) == [1.0, 10.0 / 16.5]  # noqa: SLF001
    assert timing._speeds_from({3: [2.0], 1: [1.0]}) == [1.0, 0.5]  # noqa: SLF001 - in core order
    for bad in (0, -1):
        with pytest.raises(ValueError, match="count must be >= 1"):
            timing.core_speeds(count=bad)
    with pytest.raises(TypeError, match="trials must be an int"):
        timing.core_speeds(trials=2.5)
