"""Unit tests of helpers.launcher: argument checks, the loopback store, launch (raise and report), what it
leaves behind (nothing: no listener, no error file, the process-wide temporary folder untouched), the
network namespace, kill_tree and the torchrun jobs (with a fake torchrun: no torch start-up)."""

import faulthandler
import glob
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest
import torch

from helpers import launcher

needs_fork = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="functions as demos need fork")


def _rank_and_size(rank, world_size, plus=0):
    return rank * 10 + world_size + plus


def _raise_on_rank_1(rank, world_size):
    if rank == 1:
        raise KeyError("rank 1 failed on purpose")
    return "ok"


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"world_size": 0}, ValueError, "world_size"),
        ({"world_size": 2.0}, TypeError, "world_size"),
        ({"world_size": 2, "init": "tcp"}, ValueError, "init"),
        ({"world_size": 2, "threads": 0}, ValueError, "threads"),
        ({"world_size": 2, "failures": "ignore"}, ValueError, "failures"),
    ],
)
def test_launch_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        launcher.launch([_rank_and_size], **kwargs)


def test_launch_bad_demos():
    with pytest.raises(TypeError, match="demos"):
        launcher.launch("hello")
    with pytest.raises(TypeError, match="demos"):
        launcher.launch([])
    with pytest.raises(TypeError, match="demo"):
        launcher.launch([3])
    with pytest.raises(ValueError, match="share a name"):
        launcher.launch([_rank_and_size, _rank_and_size])
    assert list(launcher.demo_names({"a": _rank_and_size, "b": _rank_and_size})) == ["a", "b"]


def test_notebook_functions_are_refused_under_spawn(monkeypatch):
    def in_notebook(rank, world_size):
        return rank

    in_notebook.__module__ = "__main__"
    monkeypatch.setattr(launcher, "_interactive_main", lambda: True)
    for method in ("spawn", "forkserver"):
        with pytest.raises(ValueError, match="start_method='fork'"):
            launcher.launch([in_notebook], start_method=method)


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
        launcher.check_rank(rank, world_size)
    assert launcher.check_rank(1, 2) == (1, 2)


def test_init_group_and_store_reject_bad_arguments():
    with pytest.raises(ValueError, match="exactly one"):
        launcher.init_group(0, 1)
    with pytest.raises(ValueError, match="exactly one"):
        launcher.init_group(0, 1, port=1234, init_file="/tmp/x")
    with pytest.raises(ValueError, match="rank"):
        launcher.init_group(3, 2, port=1234)
    with pytest.raises(ValueError, match="port"):
        launcher.loopback_store(0, 1, 70000)
    with pytest.raises(TypeError, match="port"):
        launcher.check_port("80")
    with pytest.raises(TypeError, match="listen_socket"):
        launcher.loopback_store(0, 1, 1234, listen_socket=1234)
    with launcher.listener() as sock:
        port = sock.getsockname()[1]
        with pytest.raises(ValueError, match=f"listen_socket listens on port {port}, not"):
            launcher.loopback_store(0, 1, port + 1 if port < 65535 else port - 1, listen_socket=sock)


def test_free_port_is_free_and_on_loopback():
    port = launcher.free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_store_on_a_listener_takes_connections_made_before_it_starts():
    """The window `free_port` leaves open (two jobs given one port) is closed by a socket that listens
    before any rank starts: a client that connects first waits in its queue until the store serves it."""
    import threading

    import torch.distributed as dist

    sock = launcher.listener()
    port = sock.getsockname()[1]
    with pytest.raises(OSError), socket.socket() as other:  # nobody else can have the port now
        other.bind(("127.0.0.1", port))
    got = []
    client = threading.Thread(target=lambda: got.append(launcher.loopback_store(1, 2, port, timeout=10).get("k")))
    client.start()
    time.sleep(0.3)  # the client is connected (or retrying) before the store exists
    store = launcher.loopback_store(0, 2, port, timeout=10, listen_socket=sock)
    store.set("k", "v")
    client.join(10)
    assert got == [b"v"] and sock.fileno() == -1  # the store owns the socket now
    assert isinstance(store, dist.TCPStore)
    del store


@needs_fork
def test_launch_listens_on_the_store_port_before_any_rank_starts(monkeypatch):
    import torch.multiprocessing

    real = torch.multiprocessing.start_processes
    seen = []

    def checking_start(fn, args, **kwargs):
        port, sock = args[2], args[-1]
        seen.append((sock.getsockname(), launcher.listening_addresses(tree=False)))
        assert sock.getsockname() == ("127.0.0.1", port)
        return real(fn, args=args, **kwargs)

    monkeypatch.setattr(torch.multiprocessing, "start_processes", checking_start)
    assert launcher.launch([_rank_and_size], 2, start_method="fork") == {
        0: {"_rank_and_size": 2},
        1: {"_rank_and_size": 12},
    }
    assert seen and seen[0][1] == ["127.0.0.1"]
    assert launcher.listening_addresses(tree=False) == []  # the parent's copy is closed


def test_loopback_store_listens_on_127_only():
    store = launcher.loopback_store(0, 1, launcher.free_port(), timeout=5)
    store.set("k", "v")
    assert store.get("k") == b"v"
    assert launcher.listening_addresses(tree=False) == ["127.0.0.1"]
    del store
    assert launcher.listening_addresses(tree=False) == []


@needs_fork
def test_launch_runs_functions_and_leaves_nothing(tmp_path):
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "pytorch-errorfile-*")))
    saved = tempfile.tempdir
    got = launcher.launch({"a": _rank_and_size, "b": _rank_and_size}, 2, start_method="fork", kwargs={"b": {"plus": 1}})
    assert got == {0: {"a": 2, "b": 3}, 1: {"a": 12, "b": 13}}
    got = launcher.launch([_rank_and_size], 3, init="file", start_method="fork", tmpdir=str(tmp_path))
    assert {r: got[r]["_rank_and_size"] for r in got} == {0: 3, 1: 13, 2: 23}
    assert list(tmp_path.iterdir()) == []  # the launch's own folder is gone
    assert tempfile.tempdir == saved and launcher.listening_addresses() == []
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "pytorch-errorfile-*"))) == before


@needs_fork
def test_launch_reraises_a_rank_error_and_removes_the_error_file():
    from torch.multiprocessing import ProcessRaisedException

    pattern = os.path.join(tempfile.gettempdir(), "pytorch-errorfile-*")
    before = set(glob.glob(pattern))
    with pytest.raises(ProcessRaisedException, match="rank 1 failed on purpose"):
        launcher.launch([_raise_on_rank_1], 2, start_method="fork", timeout=30)
    assert set(glob.glob(pattern)) == before


def test_other_ranks_failures_are_added_as_notes_oldest_first(tmp_path):
    """torch names one failed rank; the others' errors must be in the traceback too, the first one first."""
    import pickle
    from types import SimpleNamespace

    import torch.multiprocessing as tmp

    traces = {1: "Traceback ...\nValueError: the root cause", 2: "Traceback ...\nRuntimeError: closed by peer"}
    files = []
    for rank in range(3):
        path = tmp_path / f"error{rank}"
        files.append(str(path))
        if rank in traces:
            path.write_bytes(pickle.dumps(traces[rank]))
            os.utime(path, (100.0 + rank, 100.0 + rank))
    exc = tmp.ProcessRaisedException("rank 0 failed", error_index=0, error_pid=1)
    launcher._note_other_failures(exc, SimpleNamespace(error_files=files))
    if sys.version_info >= (3, 11):
        assert exc.__notes__ == [
            "rank 1 failed too: ValueError: the root cause",
            "rank 2 failed too: RuntimeError: closed by peer",
        ]
    assert str(exc) == "rank 0 failed"


def test_launch_never_redirects_the_temporary_folder(monkeypatch):
    """Issue 21: a launch that set tempfile.tempdir to its own folder while processes started made
    multiprocessing put this process's pymp-* folder (and the forkserver's socket) inside it, and then
    deleted it: every later forkserver start failed."""
    seen = []

    def fake_start(*args, **kwargs):
        seen.append(tempfile.tempdir)
        raise RuntimeError("stop here")

    import torch.multiprocessing

    monkeypatch.setattr(torch.multiprocessing, "start_processes", fake_start)
    saved = tempfile.tempdir
    with pytest.raises(RuntimeError, match="stop here"):
        launcher.launch([_rank_and_size], 1, start_method="fork")
    assert seen == [saved] and tempfile.tempdir == saved


@pytest.mark.skipif("forkserver" not in mp.get_all_start_methods(), reason="no forkserver on this platform")
def test_forkserver_launches_twice_in_a_row():
    for _ in range(2):
        got = launcher.launch([_rank_and_size], 1, start_method="forkserver", timeout=60)
        assert got == {0: {"_rank_and_size": 1}}
    assert os.path.isdir(mp.util.get_temp_dir())  # this process's pymp-* folder is still there


@needs_fork
def test_launch_reports_a_rank_killed_by_a_signal():
    def first(rank, world_size):
        return rank

    def second(rank, world_size):
        if rank == 1:
            faulthandler.disable()  # pytest's stack dump of the aborted child would clutter the output
            os.kill(os.getpid(), signal.SIGABRT)  # what gloo sometimes does instead of raising
        return "done"

    got = launcher.launch([first, second], 2, start_method="fork", failures="report", timeout=30)
    assert got == {0: {"first": 0, "second": "done"}, 1: {"first": 1, "exit": "killed by SIGABRT"}}


@needs_fork
def test_launch_times_out_and_says_where_each_rank_was():
    def stuck(rank, world_size):
        import torch.distributed as dist

        if rank == 1:
            time.sleep(60)  # alive but never arrives
        dist.barrier()
        return rank

    where = (
        r"after 2 s: rank 0 had finished 1 of 2 demos and was in 'stuck'; "
        r"rank 1 had finished 1 of 2 demos and was in 'stuck'; innermost call first:\n"
        r"rank 0, pid \d+: barrier \(.*\) < .*stuck \(test_launcher.py:\d+\)"
    )
    for failures in ("raise", "report"):
        with pytest.raises(TimeoutError, match=where) as caught:
            launcher.launch([_rank_and_size, stuck], 2, start_method="fork", failures=failures, timeout=2)
        lines = str(caught.value).splitlines()[1:]
        assert len(lines) == 2 and lines[1].startswith("rank 1, pid ") and "stuck (test_launcher.py:" in lines[1]


class _SlowSample(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        time.sleep(60)  # the worker never answers
        return i


@needs_fork
def test_a_timed_out_launch_shows_the_stacks_of_a_rank_s_dataloader_worker():
    def load(rank, world_size):
        loader = torch.utils.data.DataLoader(_SlowSample(), num_workers=1, multiprocessing_context="fork")
        return [int(x) for x in loader]

    with pytest.raises(TimeoutError) as caught:
        launcher.launch([load], 2, start_method="fork", failures="report", timeout=4)
    lines = str(caught.value).splitlines()[1:]
    workers = [line for line in lines if "'s child, pid" in line]
    assert len(workers) >= 2 and all("__getitem__ (test_launcher.py:" in line for line in workers), lines


GLOO_SETUP_FLAKE = RuntimeError(
    "Gloo connectFullMesh failed with [pair.cc:553] Connection closed by peer [127.0.0.1]:1"
)


def _flaky_setup(monkeypatch, tmp_path, failing_starts, error=GLOO_SETUP_FLAKE):
    """Make rank 1's `init_group` fail with `error`, as joining the group sometimes does on a busy machine,
    in its first `failing_starts` starts."""
    real = launcher.init_group

    def init_group(rank, world_size, **kwargs):
        starts = tmp_path / f"starts{rank}"
        with starts.open("a") as f:
            f.write("x")
        if rank == 1 and len(starts.read_text()) <= failing_starts:
            raise error
        return real(rank, world_size, **kwargs)

    monkeypatch.setattr(launcher, "init_group", init_group)  # forked ranks see it too


STORE_FLAKE = torch.distributed.DistNetworkError(
    "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"
)


@needs_fork
@pytest.mark.parametrize("error", [GLOO_SETUP_FLAKE, STORE_FLAKE], ids=["gloo-setup", "store-recv"])
@pytest.mark.parametrize("failures", ["raise", "report"])
def test_launch_starts_the_group_again_when_joining_it_fails(monkeypatch, tmp_path, failures, error):
    _flaky_setup(monkeypatch, tmp_path, failing_starts=1, error=error)  # leaves one spare start for a real flake
    got = launcher.launch([_rank_and_size], 2, start_method="fork", failures=failures)
    assert got == {0: {"_rank_and_size": 2}, 1: {"_rank_and_size": 12}}
    assert (tmp_path / "starts1").read_text() in ("xx", "xxx")


def _left_setup_at(rank, world_size):
    return time.monotonic()  # system-wide on Linux: comparable between the ranks


@needs_fork
def test_no_rank_leaves_the_group_setup_before_every_rank_has_set_up(monkeypatch):
    """In gloo's connection setup one side of a pair is done before the other has finished accepting; a rank
    that then ran a demo without a collective and left closed the connection the other was still setting up
    with (1 % of launches of such a demo failed so on a busy machine). Rank 0 here is slow to finish its
    setup: rank 1 must not leave `init_group` before it has."""
    real = torch.distributed.init_process_group

    def slow_on_rank_0(*args, rank, **kwargs):
        real(*args, rank=rank, **kwargs)
        if rank == 0:
            time.sleep(1.0)
            with open(os.environ["SETUP_STAMP"], "w") as f:
                f.write(repr(time.monotonic()))

    monkeypatch.setattr(torch.distributed, "init_process_group", slow_on_rank_0)  # forked ranks see it too
    with tempfile.TemporaryDirectory() as folder:
        stamp = os.path.join(folder, "rank0")
        monkeypatch.setenv("SETUP_STAMP", stamp)
        got = launcher.launch([_left_setup_at], 2, start_method="fork", timeout=30)
        with open(stamp) as f:
            rank_0_set_up = float(f.read())
    assert got[1]["_left_setup_at"] >= rank_0_set_up


@needs_fork
def test_launch_does_not_start_again_after_a_mistake_in_the_call(monkeypatch, tmp_path):
    _flaky_setup(monkeypatch, tmp_path, failing_starts=3, error=ValueError("rank must be ..."))
    with pytest.raises(torch.multiprocessing.ProcessRaisedException, match="rank must be"):
        launcher.launch([_rank_and_size], 2, start_method="fork", timeout=20)
    assert (tmp_path / "starts1").read_text() == "x"


@needs_fork
def test_launch_raises_or_reports_a_third_gloo_setup_failure(monkeypatch, tmp_path):
    _flaky_setup(monkeypatch, tmp_path, failing_starts=3)
    with pytest.raises(torch.multiprocessing.ProcessRaisedException, match="Gloo connectFullMesh failed"):
        launcher.launch([_rank_and_size], 2, start_method="fork", timeout=20)
    (tmp_path / "starts1").unlink()
    started = time.monotonic()
    got = launcher.launch([_rank_and_size], 2, start_method="fork", failures="report", timeout=20)
    assert got[1] == {"exit": "exit code 1"} and (tmp_path / "starts1").read_text() == "xxx"
    assert got[0] == {"exit": "killed by SIGTERM"}  # stopped at once: it would wait for rank 1 for 30 s
    assert time.monotonic() - started < 10


class _SlowToExit(RuntimeError):
    """A setup failure whose rank takes a while between its setup-failed note (the first `str`) and its
    exit (torch's wrapper formats the traceback): the window in which the launcher once stopped the
    failed rank itself and reported 'killed by SIGTERM' instead of its exit code."""

    calls = 0

    def __str__(self) -> str:
        type(self).calls += 1
        if type(self).calls > 1:
            time.sleep(1.0)
        return "Gloo connectFullMesh failed with [pair.cc:1] no error"


@needs_fork
def test_launch_reports_a_failed_rank_by_its_own_exit_even_when_it_exits_slowly(monkeypatch, tmp_path):
    _flaky_setup(monkeypatch, tmp_path, failing_starts=3, error=_SlowToExit())
    got = launcher.launch([_rank_and_size], 2, start_method="fork", failures="report", timeout=20)
    assert got[1] == {"exit": "exit code 1"} and got[0] == {"exit": "killed by SIGTERM"}


@needs_fork
def test_launch_threads_and_env():
    def probe(rank, world_size):
        return torch.get_num_threads(), os.environ.get("COURSE_PROBE")

    got = launcher.launch([probe], 1, start_method="fork", env={"COURSE_PROBE": "yes"})
    assert got[0]["probe"] == (1, "yes") and "COURSE_PROBE" not in os.environ


def test_describe_error():
    lost = launcher.describe_error(RuntimeError("[a/b/pair.cc:1] Connection reset by peer [127.0.0.1]:5"))
    assert lost == "RuntimeError: the connection to another rank was lost (closed/reset by peer)"
    assert launcher.describe_error(ValueError("plain")) == "ValueError: plain"
    assert launcher.describe_error(OSError("bind: EADDRINUSE")) == "OSError: address already in use"


def test_isolated_reports_errors_and_timeouts():
    assert launcher.isolated([sys.executable, "-c", "print('hi')"]).strip() == "hi"
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        launcher.isolated([sys.executable, "-c", "1/0"])
    with pytest.raises(TimeoutError):
        launcher.isolated([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
    with pytest.raises(TypeError):
        launcher.isolated("python")


@pytest.mark.skipif(not launcher.isolation_available(), reason="no private network namespace here")
def test_isolated_has_only_loopback():
    code = "import socket; print(sorted(n for _, n in socket.if_nameindex()))"
    assert launcher.isolated([sys.executable, "-c", code]).strip() == "['lo']"


def test_kill_tree_kills_children_too():
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30"])
    deadline = time.monotonic() + 5
    while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    children = psutil.Process(proc.pid).children(recursive=True)
    launcher.kill_tree(proc.pid)
    proc.wait(5)
    assert children and not any(child.is_running() and child.status() != "zombie" for child in children)
    launcher.kill_tree(proc.pid)  # already gone: no error


_FAKE_TORCHRUN = """
import json, os, sys
args = sys.argv[1:]
script = next(i for i, a in enumerate(args) if a.endswith(".py"))
out, node = args[script + 1], (args[script + 2:] or ["node0"])[0]
os.makedirs(os.path.join(os.environ["TMPDIR"], "torchelastic_fake"), exist_ok=True)  # what the real one leaves
nproc = int(next(a.split("=")[1] for a in args if a.startswith("--nproc-per-node")))
for local in range(nproc):
    rank = local if nproc > 1 else 1 - int(node[-1])  # node1 first: the helper must sort
    row = {"RANK": rank, "node": node, "TMPDIR": os.environ["TMPDIR"], "args": args}
    open(os.path.join(out, f"rank{rank}.json"), "w").write(json.dumps(row))
"""


@pytest.fixture
def fake_torchrun(monkeypatch, tmp_path):
    fake = tmp_path / "fake_torchrun.py"
    fake.write_text(_FAKE_TORCHRUN)
    monkeypatch.setattr(launcher, "_torchrun", lambda: [sys.executable, str(fake)])
    script = tmp_path / "job.py"
    script.write_text("")
    return script


def test_torchrun_jobs_commands_results_and_cleanup(fake_torchrun):
    job = launcher.torchrun_standalone(fake_torchrun, ["{results}"], 2, options=["--max-restarts=1"], timeout=20)
    assert [r["RANK"] for r in job.results] == [0, 1] and job.returncode == 0 and job.error == ""
    args = job.results[0]["args"]
    assert "--standalone" in args and "--max-restarts=1" in args and not os.path.exists(job.results[0]["TMPDIR"])
    for kind in ("c10d", "static"):
        job = launcher.torchrun_two_nodes(fake_torchrun, kind, ["{results}", "node{node}"], timeout=20)
        rows = job.results
        assert [r["RANK"] for r in rows] == [0, 1] and {r["node"] for r in rows} == {"node0", "node1"}
        assert not os.path.exists(rows[0]["TMPDIR"])
        args = rows[0]["args"]
        assert "--nnodes=2" in args
        assert any(a.startswith("--node-rank=") for a in args) is (kind == "static")
        endpoint = [a for a in args if a.startswith(("--rdzv-endpoint=", "--master-addr="))]
        assert endpoint and all("127.0.0.1" in a for a in endpoint)


def test_torchrun_bad_arguments(fake_torchrun):
    with pytest.raises(ValueError, match="kind"):
        launcher.torchrun_two_nodes(fake_torchrun, "etcd")
    with pytest.raises(ValueError, match="nproc"):
        launcher.torchrun_standalone(fake_torchrun, nproc=0)
    with pytest.raises(ValueError, match="script"):
        launcher.torchrun_standalone("/no/such/script.py")
    with pytest.raises(TypeError, match="script_args"):
        launcher.torchrun_standalone(fake_torchrun, "{results}")
    with pytest.raises(ValueError, match="failures"):
        launcher.torchrun_standalone(fake_torchrun, failures="ignore")


def test_torchrun_failure_is_raised_or_reported(monkeypatch, tmp_path):
    fake = tmp_path / "failing.py"
    fake.write_text("import sys; sys.exit('ChildFailedError: worker 1 failed')")
    monkeypatch.setattr(launcher, "_torchrun", lambda: [sys.executable, str(fake)])
    with pytest.raises(RuntimeError, match="exit code 1|ChildFailedError"):
        launcher.torchrun_two_nodes(fake, "static", timeout=20)
    with pytest.raises(RuntimeError, match="ChildFailedError"):
        launcher.torchrun_standalone(fake, timeout=20)
    job = launcher.torchrun_standalone(fake, timeout=20, failures="report")
    assert job.returncode == 1 and "ChildFailedError" in job.error and job.results == []
