"""Unit tests of helpers.distributed. One shared launch runs most demos (each launch starts processes);
the network claims of the notebook (what listens where) are checked here too."""

import multiprocessing as mp
import socket

import pytest
import torch

from helpers import distributed as dd
from helpers import watchdog


@pytest.fixture(scope="module")
def group():
    return dd.launch(["hello", "point_to_point", "collectives", "ring", "ddp"], world_size=2)


def test_hello_and_loopback_only(group):
    assert dd.listening_addresses() == []  # every listener of the launch is closed when it returns
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
    assert c0["reduce SUM to 0"] == [3.0]
    assert c0["gather rank*10 to 0"] == [0.0, 10.0] and c1["gather rank*10 to 0"] is None
    assert c0["scatter 100+r from 0"] == [100.0] and c1["scatter 100+r from 0"] == [101.0]


def test_ring_matches_all_reduce_and_formula(group):
    for rank in (0, 1):
        ring = group[rank]["ring"]
        assert ring["allclose"] is True
        assert ring["bytes sent"] == pytest.approx(ring["ring formula"], abs=8)


def test_ddp_equivalence_and_device_ids_error(group):
    for rank in (0, 1):
        ddp = group[rank]["ddp"]
        assert ddp["grads allclose full batch"] and ddp["params identical on all ranks"]
        assert ddp["device_ids=[rank]"].startswith("ValueError: DistributedDataParallel device_ids")


def test_file_init_three_ranks_and_checkpoint(tmp_path):
    path = str(tmp_path / "ck.pt")
    group = dd.launch(["hello", "ring", "checkpoint"], 3, init="file", kwargs={"checkpoint": {"path": path}})
    assert sorted(group) == [0, 1, 2]
    assert all(group[r]["ring"]["allclose"] for r in group)
    assert all(group[r]["checkpoint"]["loaded equals the live model"] for r in group)
    assert all(group[r]["hello"]["listens on"] in ([], ["127.0.0.1"]) for r in group)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"world_size": 0}, ValueError, "world_size"),
        ({"world_size": 2.0}, TypeError, "world_size"),
        ({"world_size": 2, "init": "tcp"}, ValueError, "init"),
        ({"world_size": 2, "threads": 0}, ValueError, "threads"),
    ],
)
def test_launch_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        dd.launch(["hello"], **kwargs)


def test_launch_bad_demos():
    with pytest.raises(ValueError, match="unknown demo"):
        dd.launch(["nope"])
    with pytest.raises(TypeError, match="demos"):
        dd.launch("hello")
    with pytest.raises(TypeError, match="demo"):
        dd.launch([3])


@pytest.mark.parametrize(
    "rank, world_size, error, words",
    [
        (0, 0, ValueError, "world_size"),
        (2, 2, ValueError, "rank"),
        (-1, 2, ValueError, "rank"),
        (0.0, 2, TypeError, "rank"),
        (True, 2, TypeError, "rank"),
        (0, "2", TypeError, "world_size"),
    ],
)
def test_check_rank(rank, world_size, error, words):
    with pytest.raises(error, match=words):
        dd.check_rank(rank, world_size)
    assert dd.check_rank(1, 2) == (1, 2)


def test_init_group_and_store_reject_bad_arguments():
    with pytest.raises(ValueError, match="exactly one"):
        dd.init_group(0, 1)
    with pytest.raises(ValueError, match="exactly one"):
        dd.init_group(0, 1, port=1234, init_file="/tmp/x")
    with pytest.raises(ValueError, match="rank"):
        dd.init_group(3, 2, port=1234)
    with pytest.raises(ValueError, match="port"):
        dd.loopback_store(0, 1, 70000)


def test_free_port_is_free_and_on_loopback():
    port = dd.free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_loopback_store_listens_on_127_only():
    store = dd.loopback_store(0, 1, dd.free_port(), timeout=5)
    store.set("k", "v")
    assert store.get("k") == b"v"
    assert dd.listening_addresses(tree=False) == ["127.0.0.1"]
    del store


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
    with pytest.raises(ValueError, match="kind"):
        dd.torchrun_two_nodes("etcd")
    with pytest.raises(ValueError, match="nproc"):
        dd.torchrun_standalone(0)


def test_default_store_listens_on_all_interfaces():
    assert {"::", "0.0.0.0"} & set(dd.default_store_listens())


def test_isolated_reports_errors_and_timeouts():
    import sys

    assert dd.isolated([sys.executable, "-c", "print('hi')"]).strip() == "hi"
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        dd.isolated([sys.executable, "-c", "1/0"])
    with pytest.raises(TimeoutError):
        dd.isolated([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
    with pytest.raises(TypeError):
        dd.isolated("python")


def test_uneven_join_then_return():
    table = dd.uneven(["join", "return"])
    assert table["join"] == {
        0: {"batches": 2, "outcome": "finished", "failed": False},
        1: {"batches": 3, "outcome": "finished", "failed": False},
    }
    returned = table["return"]
    assert returned[0]["outcome"] == "finished" and returned[1]["failed"] is True
    assert "by peer" in returned[1]["outcome"] or "SIGABRT" in returned[1]["outcome"]
    with pytest.raises(ValueError, match="ending"):
        dd.uneven(["crash"])
    with pytest.raises(ValueError, match="last"):
        dd.uneven(["return", "join"])


def test_uneven_hang_shows_the_rank_in_barrier_and_leaves_its_files_where_told(tmp_path):
    outcome = watchdog.run(dd.uneven_hang, tmpdir=str(tmp_path), timeout=4)
    assert outcome.status == "hung"
    names = [name.split(".")[-1] for name in outcome.stack]
    assert names.index("uneven_hang") < names.index("_uneven_rank") < names.index("barrier")
    assert [p.name[:4] for p in tmp_path.iterdir()] == ["ddp-"]  # the killed job's folder, not in /tmp
    with pytest.raises(ValueError, match="world_size"):
        dd.uneven_hang(1)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="functions as demos need fork")
def test_launch_reports_a_rank_killed_by_a_signal():
    import faulthandler
    import os
    import signal

    def first(rank, world_size):
        return rank

    def second(rank, world_size):
        if rank == 1:
            faulthandler.disable()  # pytest's stack dump of the aborted child would clutter the output
            os.kill(os.getpid(), signal.SIGABRT)  # what gloo sometimes does instead of raising
        return "done"

    got = dd.launch([first, second], 2, start_method="fork", failures="report", timeout=30)
    assert got == {0: {"first": 0, "second": "done"}, 1: {"first": 1, "exit": "killed by SIGABRT"}}
    with pytest.raises(ValueError, match="failures"):
        dd.launch(["hello"], failures="ignore")


def test_mismatch_detail_reports_on_every_rank():
    detail = dd.mismatch(True)
    assert all("Detected mismatch between collectives" in line for line in detail.values())


def test_port_taken():
    assert dd.store_host_on_taken_port() == "DistNetworkError: address already in use (within 1 s: True)"
    assert watchdog.run(dd.foreign_listener_client, timeout=3).status == "hung"


def test_describe_error():
    assert "by peer" in dd.describe_error(RuntimeError("[a/b/pair.cc:1] Connection reset by peer [127.0.0.1]:5"))
    assert dd.describe_error(ValueError("plain")) == "ValueError: plain"


def test_ddp_throughput_small():
    run = dd.ddp_throughput(2, batch=8, width=8, depth=1, steps=2)
    assert run.world_size == 2 and run.threads == 1 and run.samples_per_s > 0 and run.seconds > 0
    with pytest.raises(ValueError, match="world_size"):
        dd.ddp_throughput(0)
    with pytest.raises(TypeError, match="shapes"):
        dd.ddp_throughputs(1, {})


def test_ring_vs_allreduce_small():
    times = dd.ring_vs_allreduce(4096, repeats=1)
    assert set(times) == {"ring", "all_reduce"} and all(t > 0 for t in times.values())


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="functions as demos need fork")
def test_launch_runs_a_function_under_fork():
    def demo(rank, world_size, value=0):
        return rank * 10 + value + torch.zeros(1).item()

    got = dd.launch([demo], 2, start_method="fork", kwargs={"demo": {"value": 1}})
    assert {r: got[r]["demo"] for r in got} == {0: 1.0, 1: 11.0}


def test_launch_reraises_a_rank_error_and_times_out():
    from torch.multiprocessing import ProcessRaisedException

    with pytest.raises(ProcessRaisedException):
        dd.launch(["checkpoint"], 2, kwargs={"checkpoint": {"path": "/nonexistent/dir/x.pt"}}, timeout=30)
    with pytest.raises(TimeoutError):
        dd.launch(["uneven"], 2, kwargs={"uneven": {"ending": "barrier"}}, timeout=2)
    with pytest.raises(TimeoutError):
        dd.launch(["uneven_barrier"], 2, failures="report", timeout=2)


def test_script_is_shipped_in_the_package():
    assert dd.SCRIPT.is_file() and dd.SCRIPT.parent.joinpath("__init__.py").is_file()


def test_kill_tree_kills_children_too():
    import subprocess
    import time

    import psutil

    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30"])
    deadline = time.monotonic() + 5
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    children = psutil.Process(proc.pid).children(recursive=True)
    dd.kill_tree(proc.pid)
    proc.wait(5)
    assert children and not any(child.is_running() and child.status() != "zombie" for child in children)
    dd.kill_tree(proc.pid)  # already gone: no error


_FAKE_TORCHRUN = """
import json, os, sys
args = sys.argv[1:]
script = next(i for i, a in enumerate(args) if a.endswith("ddp_train.py"))
out, node = args[script + 1], (args[script + 3:] or ["node0"])[0]
os.makedirs(os.path.join(os.environ["TMPDIR"], "torchelastic_fake"), exist_ok=True)  # what the real one leaves behind
nproc = int(next(a.split("=")[1] for a in args if a.startswith("--nproc-per-node")))
for local in range(nproc):
    rank = local if nproc > 1 else 1 - int(node[-1])  # node1 first: the helper must sort
    row = {"RANK": rank, "node": node, "TMPDIR": os.environ["TMPDIR"], "args": args}
    open(os.path.join(out, f"rank{rank}.json"), "w").write(json.dumps(row))
"""


def test_torchrun_helpers_commands_results_and_cleanup(monkeypatch, tmp_path):
    """The helpers' own logic with a fake torchrun (no torch start-up): the commands, the results read
    back sorted by rank, and the TMPDIR folder removed with what torchrun left in it."""
    import os
    import sys

    fake = tmp_path / "fake_torchrun.py"
    fake.write_text(_FAKE_TORCHRUN)
    monkeypatch.setattr(dd, "_torchrun", lambda: [sys.executable, str(fake)])
    rows = dd.torchrun_standalone(2, steps=1, timeout=20)
    assert [r["RANK"] for r in rows] == [0, 1]
    assert "--standalone" in rows[0]["args"] and not os.path.exists(rows[0]["TMPDIR"])
    for kind in ("c10d", "static"):
        rows = dd.torchrun_two_nodes(kind, steps=1, timeout=20)
        assert [r["RANK"] for r in rows] == [0, 1] and {r["node"] for r in rows} == {"node0", "node1"}
        assert not os.path.exists(rows[0]["TMPDIR"])
        args = rows[0]["args"]
        assert "--nnodes=2" in args and any(a.startswith("--node-rank=") for a in args)
        endpoint = [a for a in args if a.startswith(("--rdzv-endpoint=", "--master-addr="))]
        assert endpoint and all("127.0.0.1" in a for a in endpoint)
    command = dd._node_command("static", 1, 1234, "/out", 2)
    assert command[-4:] == [str(dd.SCRIPT), "/out", "2", "node1"]
    assert {"--node-rank=1", "--master-addr=127.0.0.1", "--master-port=1234"} <= set(command)


def test_torchrun_failure_is_reported(monkeypatch, tmp_path):
    import sys

    fake = tmp_path / "failing.py"
    fake.write_text("import sys; sys.exit('ChildFailedError: worker 1 failed')")
    monkeypatch.setattr(dd, "_torchrun", lambda: [sys.executable, str(fake)])
    with pytest.raises(RuntimeError, match="exit code 1|ChildFailedError"):
        dd.torchrun_two_nodes("static", timeout=20)
    with pytest.raises(RuntimeError, match="ChildFailedError"):
        dd.torchrun_standalone(timeout=20)
