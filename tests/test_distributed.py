"""Unit tests of helpers.distributed, chapter 05's demos (the launcher: tests/test_launcher.py). One shared
launch runs most demos (each launch starts processes); the network claims of the notebook (what listens
where) are checked here too."""

import datetime
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import example_runner
import pytest
import torch.distributed

from helpers import distributed as dd
from helpers import launcher
from helpers.timing import Spread


@pytest.fixture(scope="module")
def group():
    return launcher.launch([dd.hello, dd.point_to_point, dd.collectives, dd.ring_check, dd.ddp_check], world_size=2)


def test_hello_and_loopback_only(group):
    assert launcher.listening_addresses() == []  # every listener of the launch is closed when it returns
    for rank in (0, 1):
        hello = group[rank]["hello"]
        assert hello == {
            "rank": rank,
            "world_size": 2,
            "backend": "gloo",
            "initialized": True,
            "listens on": ["127.0.0.1"],
        }


def test_point_to_point(group):
    assert group[0]["point_to_point"] == {}
    assert group[1]["point_to_point"]["recv"] == [1.0, 2.0, 3.0]
    assert group[1]["point_to_point"]["irecv after wait"] == [10.0, 20.0]


def test_collectives_exact(group):
    c0, c1 = group[0]["collectives"], group[1]["collectives"]
    for c in (c0, c1):
        assert c["broadcast from 0"] == [7.0, 8.0]
        assert c["all_reduce SUM of rank+1"] == [3.0]
        assert c["all_reduce AVG of rank+1"] == [1.5]
        assert c["all_reduce MAX of rank+1"] == [2.0]
        assert c["all_gather rank*10"] == [0.0, 10.0]
        assert c["barrier"] == "passed"
        assert c["all_reduce AVG of int rank+1"].startswith("RuntimeError: result type Float can't be cast")
    assert c0["reduce SUM to 0"] == [3.0]
    assert c0["gather rank*10 to 0"] == [0.0, 10.0] and c1["gather rank*10 to 0"] is None
    assert c0["scatter 100+r from 0"] == [100.0] and c1["scatter 100+r from 0"] == [101.0]


def test_ring_matches_all_reduce_and_formula(group):
    for rank in (0, 1):
        ring = group[rank]["ring_check"]
        assert ring["allclose"] is True
        assert ring["bytes sent"] == pytest.approx(ring["ring formula"], abs=8)


def test_ddp_equivalence_and_device_ids_error(group):
    for rank in (0, 1):
        ddp = group[rank]["ddp_check"]
        assert ddp["grads allclose full batch"] and ddp["params identical on all ranks"]
        assert ddp["device_ids=[rank]"].startswith("ValueError: DistributedDataParallel device_ids")


def test_file_init_three_ranks_and_checkpoint(tmp_path):
    path = str(tmp_path / "ck.pt")
    demos = [dd.hello, dd.ring_check, dd.checkpoint]
    group = launcher.launch(demos, 3, init="file", kwargs={"checkpoint": {"path": path}})
    assert sorted(group) == [0, 1, 2]
    assert all(group[r]["ring_check"]["allclose"] for r in group)
    assert all(group[r]["checkpoint"]["loaded equals the live model"] for r in group)
    assert all(group[r]["hello"]["listens on"] in ([], ["127.0.0.1"]) for r in group)


def test_byte_counts():
    assert dd.ring_bytes_per_rank(400, 4) == 600
    assert dd.ring_bytes_per_rank(400, 1) == 0
    assert dd.naive_bytes_per_rank(400, 4) == {"rank 0 sends": 1200, "other ranks send": 400.0}
    with pytest.raises(ValueError, match="world_size"):
        dd.ring_bytes_per_rank(400, 0)
    with pytest.raises(TypeError, match="nbytes"):
        dd.naive_bytes_per_rank(1.5, 2)


def test_sampler_padding_and_epochs():
    padded = dd.sampler_indices(10, 3)
    assert padded == {0: [0, 3, 6, 9], 1: [1, 4, 7, 0], 2: [2, 5, 8, 1]}
    assert dd.sampler_indices(10, 3, drop_last=True) == {0: [0, 3, 6], 1: [1, 4, 7], 2: [2, 5, 8]}
    same = dd.epoch_orders(10, 3, set_epoch=False)
    assert same[0] == same[1] == same[2]
    moving = dd.epoch_orders(10, 3, set_epoch=True)
    assert moving[0] == same[0] and moving[1] != moving[0]
    with pytest.raises(ValueError, match="rank"):
        dd.epoch_orders(10, 2, True, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size"):
        dd.sampler_indices(10, 0)


def test_two_node_commands():
    c10d = dd.two_node_commands("c10d")
    assert c10d[0] == c10d[1] and "--rdzv-backend=c10d" in c10d[0]
    static = dd.two_node_commands("static")
    assert "--node-rank=0" in static[0] and "--node-rank=1" in static[1]
    with pytest.raises(ValueError, match="kind"):
        dd.two_node_commands("etcd")


def test_default_store_listens_on_all_interfaces_and_rebinds_a_time_wait_port():
    probe = dd.default_store_probe()
    assert {"::", "0.0.0.0"} & set(probe["listens"])
    assert probe["time_wait"] is True and probe["rebound within 1 s"] is True


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="started with fork to stay cheap")
def test_first_group_bare(tmp_path):
    import torch.multiprocessing as torch_mp

    context = torch_mp.start_processes(
        dd.first_group, args=(2, str(tmp_path)), nprocs=2, join=False, start_method="fork"
    )
    try:
        assert context.join(timeout=60) or context.join(timeout=60)
    finally:
        for process in context.processes:
            process.kill()
            process.join(5)
    rows = dd.read_ranks(str(tmp_path))
    assert rows == [{"rank": r, "world_size": 2, "sum of rank+1": 3.0} for r in (0, 1)]
    # No assertion on the rendezvous file: torch deletes it only when every rank's store has been
    # freed, which a rank's exit can skip (1 run in 150 kept it on a busy machine).


def test_which_wins_uses_every_round():
    from helpers.timing import Load

    load = Load(0.0, 0.0, 2, 1.0)
    fast, slow = dd.TrainRun(2, 1, [10.0, 11.0, 12.0], 1.0, load), dd.TrainRun(1, 2, [5.0, 6.0, 9.0], 1.0, load)
    overlapping = dd.TrainRun(1, 2, [5.0, 6.0, 10.5], 1.0, load)
    assert fast.samples_per_s == 11.0 and fast.spread.low == 10.0
    assert dd.which_wins("a", fast, "b", slow).startswith("a was faster in every round")
    assert dd.which_wins("b", slow, "a", fast).startswith("a was faster in every round")
    assert "within noise" in dd.which_wins("a", fast, "b", overlapping)
    with pytest.raises(TypeError, match="run_a"):
        dd.which_wins("a", 1.0, "b", slow)


def test_uneven_barrier_times_out_on_both_ranks_then_join_and_return():
    table = dd.uneven(["barrier", "join", "return"], group_timeout=2.0)
    for rank, where in ((0, "barrier"), (1, "backward (DDP's all-reduce)")):
        row = table["barrier"][rank]
        assert row["failed"] is True and row["waited in"] == where, row
        if "after first wait" in row:  # it raised: the first gloo timer to fire (its own or the other rank's)
            # ended its wait, which may be a moment before its own timer, but never before the timeout had
            # passed since the first rank began to wait; the error names the timeout or the closed pair
            assert 2.0 <= row["after first wait"] < 10.0 and 0.0 < row["seconds"] < 10.0, row
            assert "Timed out waiting 2000ms" in row["outcome"] or "by peer" in row["outcome"], row
        else:  # gloo aborted it (SIGABRT) instead of raising; its stamp file still says where it waited
            assert "aborted" in row["outcome"], row
    first = dd.first_error_after(table["barrier"])
    assert first is None or 2.0 <= first < 10.0
    assert {rank: row["outcome"] for rank, row in table["join"].items()} == {0: "finished", 1: "finished"}
    assert [row["batches"] for row in table["join"].values()] == [2, 3]
    returned = table["return"]
    assert returned[0]["outcome"] == "finished" and returned[1]["failed"] is True
    assert "by peer" in returned[1]["outcome"] or "SIGABRT" in returned[1]["outcome"]


def _late_barrier_ending(rank: int, world_size: int) -> dict:
    """uneven_rank's "barrier" ending (its own group, with a 2-s limit), rank 1 coming to it 3 s late."""
    if rank == 1:
        time.sleep(3)
    return dd.uneven_rank(rank, world_size, ending="barrier", group_timeout=2.0)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the late demo is defined in this file")
def test_a_rank_that_comes_late_to_the_barrier_endings_group_is_still_waited_for():
    """A group's timeout also bounds its setup: made with the 2-s limit itself, the "barrier" ending's group
    failed to form when one rank came more than 2 s after the other (a busy machine), outside the demo's
    `try`, and the rank's result was lost. The limit must apply to the waits the demo shows."""
    ranks = launcher.launch({"late": _late_barrier_ending}, 2, start_method="fork", failures="report", timeout=120)
    for rank, where in ((0, "barrier"), (1, "backward (DDP's all-reduce)")):
        if "late" in ranks[rank]:
            assert ranks[rank]["late"]["waited in"] == where and ranks[rank]["late"]["seconds"] < 10, ranks[rank]
        else:  # gloo aborted it in the demo's wait instead of raising, as 05 shows; a group that failed to form
            # raised a Python error instead (exit code 1)
            assert ranks[rank].get("exit") == "killed by SIGABRT", ranks[rank]


def _peer_aborted_in_barrier_ending(rank: int, world_size: int) -> dict:
    """uneven_rank's "barrier" ending on rank 0; rank 1 joins the same groups and model, then dies as gloo
    sometimes makes a rank die in this demo (SIGABRT) instead of raising."""
    if rank == 0:
        return dd.uneven_rank(rank, world_size, ending="barrier", group_timeout=30.0)
    torch.distributed.barrier()
    group = torch.distributed.new_group(timeout=datetime.timedelta(seconds=30))
    dd.DDP(dd.make_model(), process_group=group)
    os.abort()


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the demo is defined in this file")
def test_the_barrier_ending_keeps_its_result_when_the_other_rank_was_aborted():
    """The ranks meet in a last barrier so that neither leaves while the other still waits; when gloo has
    aborted the other rank, that barrier fails at once, and the surviving rank must still return what it
    saw (it ended with exit code 1 instead, its result lost, in a clean run with one core kept busy)."""
    ranks = launcher.launch(
        {"aborted": _peer_aborted_in_barrier_ending}, 2, start_method="fork", failures="report", timeout=60
    )
    assert ranks[1] == {"exit": "killed by SIGABRT"}
    assert "exit" not in ranks[0], ranks[0]
    assert ranks[0]["aborted"]["outcome"].endswith("the connection to another rank was lost (closed/reset by peer)")
    assert ranks[0]["aborted"]["seconds"] < 10


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"endings": ["crash"]}, "ending"),
        ({"endings": ["return", "join"]}, "last"),
        ({"endings": []}, "non-empty"),
        ({"group_timeout": 0}, "group_timeout"),
        ({"group_timeout": True}, "group_timeout"),
    ],
)
def test_uneven_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dd.uneven(**kwargs)


def test_uneven_rank_refuses_a_bad_ending_before_touching_a_group():
    with pytest.raises(ValueError, match="ending"):
        dd.uneven_rank(0, 2, ending="crash")
    with pytest.raises(ValueError, match="group_timeout"):
        dd.uneven_rank(0, 2, ending="barrier", group_timeout=-1)


def test_watch_hang_refuses_an_empty_reach():
    with pytest.raises(TypeError, match="reach"):
        dd.watch_hang(dd.foreign_listener_client, reach="")


def test_mismatch_detail_reports_on_every_rank():
    detail = dd.mismatch(True)
    assert all("Detected mismatch between collectives" in line for line in detail.values())


def test_port_taken():
    assert dd.store_host_on_taken_port() == "DistNetworkError: address already in use (within 1 s: True)"
    assert dd.watch_hang(dd.foreign_listener_client, reach="foreign_listener_client").status == "hung"


def test_ddp_throughput_small():
    run = dd.ddp_throughput(2, batch=8, width=8, depth=1, steps=2, rounds=3)
    assert run.world_size == 2 and run.threads == 1 and len(run.rounds) == 3 and run.samples_per_s > 0
    assert run.spread.low <= run.samples_per_s <= run.spread.high and run.load.cores >= 1
    with pytest.raises(ValueError, match="world_size"):
        dd.ddp_throughput(0)
    with pytest.raises(TypeError, match="shapes"):
        dd.ddp_throughputs(1, {})


def test_ring_vs_allreduce_small():
    times = dd.ring_vs_allreduce(4096, repeats=3)
    assert set(times) == {"ring", "all_reduce", "load"}
    assert all(times[name].n == 3 and 0 < times[name].low <= times[name].median for name in ("ring", "all_reduce"))


@pytest.mark.parametrize(
    ("ring", "gloo", "verdict"),
    [
        ((2.0, 1.0), (3.0, 1.5), "the ring by hand was faster"),
        ((3.0, 1.5), (2.0, 1.0), "dist.all_reduce was faster"),
        ((2.08, 1.30), (3.28, 1.00), "no winner"),  # a stored run: medians 1.58x, best calls 0.77x
    ],
)
def test_ring_reading_names_a_winner_only_when_medians_and_best_calls_agree(ring, gloo, verdict):
    times = {name: Spread(median, low, 9.0, 15) for name, (median, low) in (("ring", ring), ("all_reduce", gloo))}
    assert verdict in dd.ring_reading(times)
    with pytest.raises(TypeError, match="ring_times"):
        dd.ring_reading({"ring": 1.0})


def test_script_is_shipped_in_the_package():
    assert dd.SCRIPT.is_file() and dd.SCRIPT.parent.joinpath("__init__.py").is_file()


def test_after_first_wait_measures_from_the_first_rank_that_waited():
    # rank 1 began waiting 0.4 s before rank 0; its timer (2 s) fired first and closed the pair, so rank 0
    # raised only 1.6 s into its own wait: still 2 s after the first rank began to wait
    rows = {
        0: {"began waiting at": 10.4, "failed at": 12.0, "seconds": 1.6},
        1: {"began waiting at": 10.0, "failed at": 12.0, "seconds": 2.0},
        2: {"outcome": "finished"},
    }
    dd._after_first_wait(rows)
    assert rows[0]["after first wait"] == pytest.approx(2.0) and rows[1]["after first wait"] == pytest.approx(2.0)
    assert "after first wait" not in rows[2]


# ---- the chapter's copyable script: examples/05_ddp_torchrun.py --------------------------------------
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "05_ddp_torchrun.py"


def test_example_script_trains_with_torchrun_and_leaves_nothing_behind(tmp_path):
    """The script a learner copies, under torchrun with 2 processes and gloo on loopback (a c10d rendezvous
    on 127.0.0.1 rather than the docstring's --standalone, which is the same store on localhost): the loss
    falls, rank 0's checkpoint loads with weights_only=True, and no process or file outlives the job."""
    import torch
    from torch import nn

    checkpoint = tmp_path / "model.pt"
    rank0 = example_runner.run(EXAMPLE.name, str(checkpoint), nproc=2, timeout=180).ranks[0]
    losses = [float(line.rsplit(" ", 1)[1]) for line in rank0.splitlines() if line.startswith("epoch ")]
    assert len(losses) == 3 and losses[-1] < losses[0] / 2, rank0
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    model.load_state_dict(torch.load(checkpoint, weights_only=True))  # keys without "module."


# What a rank of this example wrote when torch 2.13 aborted it at exit (a clean run with the cores busy), and
# torchrun's summary of that job; a rank that aborts while its script runs has a Python frame in the dump.
_ABORTED_AT_EXIT = """terminate called without an active exception
Fatal Python error: Aborted

Thread 0x00007fa200203b80 (most recent call first):
  <no Python frame>

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""
_ABORTED_IN_BARRIER = _ABORTED_AT_EXIT.replace(
    "  <no Python frame>", '  File "examples/05_ddp_torchrun.py", line 51 in train'
)
_SUMMARY = """Failures:
[1]:
  time      : 2026-12-05_03:30:11
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 7457)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 7457
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_03:30:11
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 7456)  (SIGABRT)
"""


# The same abort, seen once in a clean run of 09's example: the fault handler crashed while it dumped the
# threads (torchrun then reported exit code -11), so the dump lists none; the exit marker came before it.
_DUMP_CRASHED = """example_runner: the script returned
terminate called without an active exception
Fatal Python error: Aborted

Thread 0xFatal Python error: Segmentation fault

"""
_SUMMARY_SEGV = _SUMMARY.replace("exitcode  : -6 (pid: 7456)  (SIGABRT)", "exitcode  : -11 (pid: 7456)  (SIGSEGV)")


def test_the_runner_reads_the_exit_marker_when_the_dump_itself_crashed():
    assert example_runner.aborted_after_its_script(_DUMP_CRASHED)
    assert not example_runner.aborted_after_its_script(_DUMP_CRASHED.replace(example_runner._RETURNED, ""))
    # the marker does not excuse a dump that shows the script still running
    assert not example_runner.aborted_after_its_script(example_runner._RETURNED + _ABORTED_IN_BARRIER)
    assert example_runner._aborted_at_exit(_SUMMARY_SEGV, {0: _DUMP_CRASHED, 1: ""}) == [0]
    assert example_runner._aborted_at_exit(_SUMMARY_SEGV, {0: "Fatal Python error: Segmentation fault\n", 1: ""}) == []


def test_the_exit_marker_is_printed_by_a_rank_once_its_script_returned_and_only_by_a_rank():
    env = {**os.environ, "PYTHONPATH": str(example_runner._MARKER)}
    script = "import sys; print('work', file=sys.stderr)"
    rank = subprocess.run([sys.executable, "-c", script], env={**env, "LOCAL_RANK": "0"}, capture_output=True)
    assert rank.stderr.decode() == "work\n" + example_runner._RETURNED
    agent = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    assert agent.stderr.decode() == "work\n"


def test_the_runner_tells_an_abort_after_the_script_returned_from_one_during_it():
    assert example_runner.aborted_after_its_script(_ABORTED_AT_EXIT)
    assert not example_runner.aborted_after_its_script(_ABORTED_IN_BARRIER)
    assert not example_runner.aborted_after_its_script("terminate called without an active exception\n")  # no dump
    assert example_runner._aborted_at_exit(_SUMMARY, {0: _ABORTED_AT_EXIT, 1: ""}) == [0]
    assert example_runner._aborted_at_exit(_SUMMARY, {0: _ABORTED_IN_BARRIER, 1: ""}) == []
    # the other rank failed on its own (exit code 1), not by torchrun's SIGTERM: that failure counts
    failed = _SUMMARY.replace("-15 (pid: 7457)  (SIGTERM)", "1 (pid: 7457)")
    assert example_runner._aborted_at_exit(failed, {0: _ABORTED_AT_EXIT, 1: ""}) == []


def test_example_script_uses_what_the_chapter_teaches():
    text = EXAMPLE.read_text()
    for needed in ("init_process_group", "DDP(", "DistributedSampler", "set_epoch", "destroy_process_group",
                   "__main__"):  # fmt: skip
        assert needed in text, needed
    assert "helpers" not in text  # copyable: nothing of the course's own


def test_torchrun_job_refuses_an_unknown_kind_or_steps():
    with pytest.raises(ValueError, match="kind"):
        dd.torchrun_job("slurm")
    with pytest.raises(ValueError, match="steps"):
        dd.torchrun_job("standalone", steps=0)


def test_a_rank_gloo_aborted_still_reports_where_it_waited(tmp_path):
    # rank 0 was aborted (no result), but it stamped its wait first; rank 1 raised 3 s after rank 0 began
    (tmp_path / "rank0.json").write_text('{"call": "barrier", "since": 10.0}')
    assert dd._stamp(str(tmp_path), 0) == {"waited in": "barrier", "began waiting at": 10.0}
    assert dd._stamp(str(tmp_path), 1) == {}
    rows = {
        0: {"outcome": "killed by SIGABRT", **dd._stamp(str(tmp_path), 0)},
        1: {"outcome": "RuntimeError", "began waiting at": 10.2, "failed at": 13.0},
    }
    dd._after_first_wait(rows)
    assert dd.first_error_after(rows) == pytest.approx(3.0)
    assert dd.first_error_after({0: {"outcome": "killed by SIGABRT"}}) is None


def test_only_a_sigabrt_is_reported_as_gloos_abort():
    results = {
        0: {"uneven_barrier": {"outcome": "finished"}},
        1: {"exit": "killed by SIGABRT"},
        2: {"exit": "exit code 1"},
        3: {},
    }
    outcomes = dd._outcomes(results, "uneven_barrier")
    assert outcomes[0] == {"outcome": "finished"}
    assert outcomes[1] == "killed by SIGABRT (gloo aborted the process instead of raising)"
    assert outcomes[2] == "exit code 1"  # an error outside the demo, not gloo's abort
    assert outcomes[3] == "no result"


def test_weak_scaling_measures_one_process_and_ddp_in_turns():
    measured = dd.weak_scaling(2, batch=8, width=8, depth=1, steps=2, rounds=3)
    single, many = measured.single, measured.ddp
    assert (single.world_size, many.world_size) == (1, 2) and len(single.rounds) == len(many.rounds) == 3
    assert single.samples_per_s > 0 and many.samples_per_s > 0 and many.startup >= 0
    if hasattr(os, "sched_setaffinity"):  # the cores' speeds before each round and after the last
        assert len(measured.core_speeds) == 4 and all(max(speeds) == 1.0 for speeds in measured.core_speeds)
    else:
        assert measured.core_speeds == []
    with pytest.raises(ValueError, match="world_size must be at least 2"):
        dd.weak_scaling(1)
    with pytest.raises(ValueError, match="rounds"):
        dd.weak_scaling(2, rounds=0)
