import multiprocessing as mp
import os

import pytest

from helpers import environment


def test_usable_cores_is_within_the_machine():
    cores = environment.usable_cores()
    assert 1 <= cores <= (os.cpu_count() or cores)


def test_pinnable_cores_are_this_process_cores_or_none_without_pinning(monkeypatch):
    if hasattr(os, "sched_setaffinity"):
        assert environment.pinnable_cores() == sorted(os.sched_getaffinity(0))
    monkeypatch.delattr(environment.os, "sched_setaffinity", raising=False)  # as on macOS and Windows
    assert environment.pinnable_cores() is None


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


def test_remove_mp_temp_dir_removes_the_folder_and_it_comes_back():
    """No monkeypatching of multiprocessing's own state here: restoring an old `_config` afterwards would
    point this process at a folder the test removed, and every later fd-passing send (a DataLoader
    worker's batch) would then fail in a feeder thread and hang its receiver."""
    from multiprocessing import util

    assert environment.remove_mp_temp_dir() is True  # whatever an earlier test left
    folder = util.get_temp_dir()
    assert os.path.isdir(folder)
    assert environment.remove_mp_temp_dir() is True
    assert not os.path.exists(folder) and mp.current_process()._config.get("tempdir") is None
    assert environment.remove_mp_temp_dir() is True  # nothing left to remove
    assert os.path.isdir(util.get_temp_dir())  # made again on next need


def test_remove_mp_temp_dir_stops_the_resource_sharer_and_sending_still_works(monkeypatch):
    """The first tensor sent under file_descriptor starts the resource sharer, whose socket lives in a
    pymp-* folder; after removing it, the next send starts a new one."""
    import shutil
    import tempfile
    from pathlib import Path

    from helpers import sharing

    # A short folder, not tmp_path: the sharer's socket path (folder/pymp-*/listener-*) must fit AF_UNIX's
    # 108 characters, which pytest's long tmp_path names under a long TMPDIR exceed.
    tmp_path = Path(tempfile.mkdtemp(prefix="rs-"))

    environment.remove_mp_temp_dir()  # an earlier test's folder, elsewhere
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    try:
        assert sharing.crossing("tensor")["parent sees the child's write"]
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith("pymp-")], "sending made no pymp folder"
        assert environment.remove_mp_temp_dir() is True and not list(tmp_path.iterdir())
        assert sharing.crossing("tensor")["parent sees the child's write"]  # the sharer starts again
        assert environment.remove_mp_temp_dir() is True and not list(tmp_path.iterdir())
    finally:
        environment.remove_mp_temp_dir()  # never leave this process pointed at a folder about to go
        shutil.rmtree(tmp_path, ignore_errors=True)


_OPTIMIZER_IN_TMP = """
import os, sys, tempfile
import helpers
import torch
torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)   # imports torch._dynamo, which makes its cache
print(os.listdir(tempfile.gettempdir()), os.environ["TORCHINDUCTOR_CACHE_DIR"])
"""


def test_torch_compiler_cache_stays_out_of_the_temporary_folder(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "TMPDIR": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache-home")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", _OPTIMIZER_IN_TMP], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # nothing in the temporary folder but the cache home this test pointed XDG_CACHE_HOME into
    assert done.stdout.split() == ["['cache-home']", str(tmp_path / "cache-home" / "torchinductor")]


def test_openmp_runtime_names_the_loaded_library():
    import torch  # noqa: F401 - loads the runtime

    assert environment.openmp_runtime() in ("GNU libgomp", "Intel libiomp", "LLVM libomp", "none loaded")


def test_cpu_quota_on_this_machine_is_none_or_positive():
    quota = environment.cpu_quota()
    assert quota is None or quota > 0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning needs Linux")
def test_pinned_runs_the_block_on_one_core_and_restores_the_rest():
    cores = sorted(os.sched_getaffinity(0))
    with environment.pinned(cores[-1]):
        assert os.sched_getaffinity(0) == {cores[-1]}
    assert sorted(os.sched_getaffinity(0)) == cores
    with environment.pinned(None):
        assert sorted(os.sched_getaffinity(0)) == cores


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning needs Linux")
@pytest.mark.parametrize("core", [-1, 10_000, True, "0", 0.0])
def test_pinned_refuses_a_core_this_process_cannot_use(core):
    with pytest.raises(ValueError, match="core must be one of"), environment.pinned(core):
        pass
