"""`make check`: each check's PASS and each WARN/FAIL path, in a simulated bad environment."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import setup_check as sc

REPO = Path(__file__).resolve().parent.parent


def _script(path: Path, body: str) -> str:
    """An executable shell script standing in for a system command."""
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# ------------------------------------------------------------------------------------------ report


def test_result_requires_a_fix_and_a_known_status():
    with pytest.raises(ValueError, match="needs a fix"):
        sc.Result("WARN", "x", "y")
    with pytest.raises(ValueError, match="status"):
        sc.Result("OK", "x", "y")
    line = sc.Result("FAIL", "x", "broken", "do this").render()
    assert line.startswith("FAIL  x") and "fix: do this" in line


def test_summary_names_the_verdict():
    ok, warn = sc.Result("PASS", "a", "b"), sc.Result("WARN", "a", "b", "c")
    assert "ready for the course (read the WARN lines" in sc.summary([ok, warn], 1.0)
    assert sc.summary([sc.Result("FAIL", "a", "b", sc.SETUP_FIRST)], 1.0).endswith("run make setup first")
    assert "1 PASS, 0 WARN, 1 FAIL" in sc.summary([ok, sc.Result("FAIL", "a", "b", "c")], 1.0)


def test_a_check_that_breaks_is_a_fail_line_not_a_traceback():
    def broken() -> sc.Result:
        raise KeyError("boom")

    result = sc._guarded("thing", broken)
    assert result.status == "FAIL" and "KeyError" in result.detail and result.fix


# -------------------------------------------------------------------------------------- interpreter


def test_python_version():
    assert sc.check_python((3, 11, 7)).status == "PASS"
    assert "3.11" in sc.check_python((3, 12, 1)).detail
    assert sc.check_python((3, 9, 18)).status == "FAIL"


def test_venv(tmp_path):
    (tmp_path / ".venv").mkdir()
    assert sc.in_course_venv(str(tmp_path / ".venv"), "/usr", tmp_path)
    assert not sc.in_course_venv("/usr", "/usr", tmp_path)
    assert not sc.in_course_venv(str(tmp_path / "other"), "/usr", tmp_path)
    assert sc.check_venv(True, True).status == "PASS"
    assert sc.check_venv(False, True).status == "WARN"
    failed = sc.check_venv(False, False)
    assert failed.status == "FAIL" and "run make setup first" in failed.fix


def test_system_python_without_venv_fails_in_seconds_with_run_make_setup_first():
    """What `make check` runs on a fresh clone: the script path, with no .venv and no torch."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [sys.base_prefix + "/bin/python3", "-S", str(REPO / "helpers" / "setup_check.py")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd="/",
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout.strip().splitlines()[-1].endswith("not ready: run make setup first")
    for name in ("Python", "cores", "/dev/shm", "open files", "loopback", "user"):
        assert any(line.split()[1:2] == [name.split()[0]] for line in done.stdout.splitlines()), name
    assert "torch " not in done.stdout and "start methods" not in done.stdout


# --------------------------------------------------------------------------------------------- torch


def _dist(name: str, version: str, size: int) -> SimpleNamespace:
    files = [SimpleNamespace(size=size), SimpleNamespace(size=None)]  # RECORD lists no size for some files
    return SimpleNamespace(metadata={"Name": name}, version=version, files=files)


def test_pins_follow_python_markers(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text(
        '# c\ntorch==2.13.0\nnumpy==2.4.6 ; python_version >= "3.11"\nnumpy==2.2.6 ; python_version < "3.11"\n'
    )
    assert sc.pinned_versions(req, (3, 11)) == {"torch": "2.13.0", "numpy": "2.4.6"}
    assert sc.pinned_versions(req, (3, 10))["numpy"] == "2.2.6"
    assert sc.pinned_versions(REPO / "requirements.txt")["torch"]


def test_torch_cpu_build_passes():
    result = sc.check_torch([_dist("torch", "2.13.0+cpu", 700 * 2**20)], "2.13.0", gpu=False)
    assert result.status == "PASS" and "CPU build" in result.detail and "0.7 GB" in result.detail


def test_torch_cuda_build_without_gpu_warns_with_its_size_and_the_cpu_index():
    dists = [_dist("torch", "2.13.0", 2 * 2**30), _dist("nvidia-cublas-cu12", "12", 3 * 2**30), _dist("numpy", "2", 10)]
    result = sc.check_torch(dists, "2.13.0", gpu=False)
    assert result.status == "WARN" and "CUDA build, 5.0 GB" in result.detail
    assert "download.pytorch.org/whl/cpu" in result.fix
    assert sc.check_torch(dists, "2.13.0", gpu=True).status == "PASS"


def test_torch_wrong_version_warns_and_missing_fails():
    assert sc.check_torch([_dist("torch", "2.9.1+cpu", 1)], "2.13.0", gpu=False).status == "WARN"
    missing = sc.check_torch([_dist("numpy", "2", 1)], "2.13.0", gpu=False)
    assert missing.status == "FAIL" and missing.fix == sc.SETUP_FIRST


def test_torch_real_installation_passes():
    pin = sc.pinned_versions()["torch"]
    assert sc.check_torch(importlib.metadata.distributions(), pin, sc.gpu_present()).status == "PASS"


# --------------------------------------------------------------------------------------------- cores


def _cgroup_tree(tmp_path: Path, v2: str | None = None, v1: tuple[str, str] | None = None) -> tuple[Path, Path]:
    """A stand-in /proc/self/cgroup, mountinfo and cgroup folders below tmp_path, as in a container
    whose cgroup path is /docker/abc but whose mount shows only its own subtree."""
    if v2 is not None:
        (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
        (tmp_path / "sys/fs/cgroup/cpu.max").write_text(v2)
        cgroup = "0::/\n"
        mountinfo = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    else:
        assert v1 is not None
        folder = tmp_path / "sys/fs/cgroup/cpu,cpuacct"
        folder.mkdir(parents=True)
        (folder / "cpu.cfs_quota_us").write_text(v1[0])
        (folder / "cpu.cfs_period_us").write_text(v1[1])
        cgroup = "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n"
        mountinfo = "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
    (tmp_path / "cgroup").write_text(cgroup)
    (tmp_path / "mountinfo").write_text(mountinfo)
    return tmp_path / "cgroup", tmp_path / "mountinfo"


def test_cgroup_v2_quota(tmp_path):
    cgroup, mountinfo = _cgroup_tree(tmp_path, v2="150000 100000\n")
    assert sc.cpu_quota(cgroup, mountinfo, tmp_path) == 1.5


def test_cgroup_v2_without_quota(tmp_path):
    cgroup, mountinfo = _cgroup_tree(tmp_path, v2="max 100000\n")
    assert sc.cpu_quota(cgroup, mountinfo, tmp_path) is None


def test_cgroup_v2_quota_of_an_ancestor_applies(tmp_path):
    cgroup, mountinfo = _cgroup_tree(tmp_path, v2="400000 100000\n")
    child = tmp_path / "sys/fs/cgroup/job"
    child.mkdir()
    (child / "cpu.max").write_text("max 100000\n")
    cgroup.write_text("0::/job\n")
    assert sc.cpu_quota(cgroup, mountinfo, tmp_path) == 4.0


def test_cgroup_v1_quota_and_none(tmp_path):
    cgroup, mountinfo = _cgroup_tree(tmp_path, v1=("50000", "100000"))
    assert sc.cpu_quota(cgroup, mountinfo, tmp_path) == 0.5
    (tmp_path / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us").write_text("-1\n")
    assert sc.cpu_quota(cgroup, mountinfo, tmp_path) is None


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert sc.cpu_quota(tmp_path / "missing", tmp_path / "missing", tmp_path) is None
    assert sc.cpu_quota() is None or sc.cpu_quota() > 0  # this machine, whatever it has


def test_cores():
    assert sc.check_cores(4, 8, None).status == "PASS"
    assert sc.check_cores(1, 8, None).status == "WARN"
    quota = sc.check_cores(8, 8, 1.5)
    assert quota.status == "WARN" and "quota of 1.5" in quota.detail
    assert "ignore the quota" in sc.check_cores(8, 8, 2.0).detail


# ------------------------------------------------------------------------------------ start methods


def _children() -> set[int]:
    """Live children, without multiprocessing's resource tracker (the first spawn starts it for good)."""
    import psutil

    alive = set()
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                alive.add(child.pid)
    return alive


def test_a_child_that_does_not_answer_in_time_fails_and_is_killed():
    before = _children()
    result = sc.check_start_methods(timeout=0.001, methods=("spawn",))
    assert result.status == "FAIL" and "no answer within" in result.detail
    assert not (_children() - before), "the check left its child running"


def test_a_missing_method_is_named():
    result = sc.check_start_methods(methods=("nosuchmethod",))
    assert "no nosuchmethod here" in result.detail


# ---------------------------------------------------------------------------------- files and memory


def test_shm_pass_and_tiny(tmp_path, monkeypatch):
    assert sc.check_shm(tmp_path, minimum=1).status == "PASS"
    # Docker's default: a 64 MB /dev/shm
    monkeypatch.setattr(sc.shutil, "disk_usage", lambda p: SimpleNamespace(total=64 * 2**20, free=64 * 2**20))
    tiny = sc.check_shm(tmp_path)
    assert tiny.status == "WARN" and "0.06 GB free" in tiny.detail and "--shm-size" in tiny.fix


def test_shm_missing(tmp_path):
    assert sc.check_shm(tmp_path / "none", platform="linux").status == "FAIL"
    assert sc.check_shm(tmp_path / "none", platform="darwin").status == "PASS"


def test_open_files_limits():
    assert sc.check_open_files((20000, 20000), 10).status == "PASS"
    low_soft = sc.check_open_files((256, 20000), 10)
    assert low_soft.status == "PASS" and "ulimit -n" in low_soft.detail
    low_hard = sc.check_open_files((256, 512), 10)
    assert low_hard.status == "WARN" and "1034" in low_hard.detail
    assert sc.check_open_files((-1, -1), 10).status == "PASS"


def test_open_files_in_a_process_with_a_lowered_hard_limit():
    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256));"
        "from helpers.setup_check import check_open_files; r = check_open_files(); print(r.status, r.detail)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("WARN soft 256, hard 256"), done.stdout + done.stderr


# ------------------------------------------------------------------------------------------- network


def test_loopback_free_port():
    result = sc.check_loopback()
    assert result.status == "PASS" and "127.0.0.1:" in result.detail


def test_loopback_taken_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        result = sc.check_loopback(taken.getsockname()[1])
    assert result.status == "FAIL" and "in use" in result.detail.lower()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="unshare is Linux only")
def test_unshare_pass_or_warn_here():
    for check in (sc.check_unshare_network, sc.check_unshare_mount):
        assert check().status in ("PASS", "WARN")


def test_unshare_blocked(tmp_path):
    message = "unshare: write failed /proc/self/uid_map: Operation not permitted"
    blocked = _script(tmp_path / "unshare", f'echo "{message}" >&2; exit 1')
    for check in (sc.check_unshare_network, sc.check_unshare_mount):
        result = check(unshare=blocked, platform="linux")
        assert result.status == "WARN" and "Operation not permitted" in result.detail and result.fix
        assert check(unshare=None, platform="linux").status == "WARN"
        assert check(unshare=blocked, platform="darwin").status == "PASS"


def test_unshare_that_hangs_is_bounded(tmp_path):
    slow = _script(tmp_path / "unshare", "sleep 30")
    result = sc.check_unshare_network(unshare=slow, platform="linux", timeout=0.5)
    assert result.status == "WARN" and "no answer" in result.detail


# ---------------------------------------------------------------------------------------------- py-spy


def test_py_spy_attaches_here():
    spy = sc._py_spy_path()
    result = sc.check_py_spy(spy, sc.ptrace_scope())
    assert result.status in ("PASS", "WARN"), result.detail  # WARN where ptrace is blocked
    if result.status == "PASS":
        assert "read its stack" in result.detail


# py-spy's own message without ptrace permission: it suggests sudo, which a container does not have
_DENIED = (
    'echo "Permission Denied: Try running again with elevated permissions by going '
    "'sudo env PATH=\\$PATH !!'\" >&2; exit 1"
)


def test_py_spy_without_ptrace_is_reworded(tmp_path):
    spy = _script(tmp_path / "py-spy", _DENIED)
    result = sc.check_py_spy(spy, scope=0)
    assert result.status == "WARN" and "SYS_PTRACE" in result.fix and "does not allow ptrace" in result.detail


def test_py_spy_with_yama_scope_1_says_children_only(tmp_path):
    spy = _script(tmp_path / "py-spy", _DENIED)
    (tmp_path / "scope").write_text("1\n")
    result = sc.check_py_spy(spy, sc.ptrace_scope(tmp_path / "scope"))
    assert result.status == "WARN" and "ptrace_scope is 1" in result.detail and "ptrace_scope=0" in result.fix
    assert sc.ptrace_scope(tmp_path / "missing") is None


def test_py_spy_target_that_cannot_start_fails(tmp_path):
    spy = _script(tmp_path / "py-spy", "exit 0")
    result = sc.check_py_spy(spy, None, python=_script(tmp_path / "python", "exit 3"))
    assert result.status == "FAIL" and "exited with code 3" in result.detail


def test_py_spy_missing_fails(tmp_path):
    assert sc.check_py_spy(None, None).status == "FAIL"
    assert sc.check_py_spy(str(tmp_path / "nothing"), None).status == "FAIL"


# --------------------------------------------------------------------------------------------- Jupyter


def _versions(missing: str | None = None):
    def version(name: str) -> str:
        if name == missing:
            raise importlib.metadata.PackageNotFoundError(name)
        return "1.0"

    return version


def test_jupyter_here_passes():
    assert sc.check_jupyter(pins=sc.pinned_versions()).status == "PASS"


def test_jupyter_missing_package(tmp_path):
    result = sc.check_jupyter(_versions("ipywidgets"), [tmp_path])
    assert result.status == "FAIL" and "ipywidgets" in result.detail


def test_jupyter_missing_widgets_extension(tmp_path):
    result = sc.check_jupyter(_versions(), [tmp_path / "a", tmp_path / "b"])
    assert result.status == "FAIL" and "jupyterlab-manager" in result.detail


def test_jupyter_extension_found_in_any_path_and_pins_compared(tmp_path):
    found = tmp_path / "b" / sc.WIDGETS_EXTENSION
    found.parent.mkdir(parents=True)
    found.write_text("{}")
    assert sc.check_jupyter(_versions(), [tmp_path / "a", tmp_path / "b"]).status == "PASS"
    assert sc.check_jupyter(_versions(), [tmp_path / "b"], pins={"jupyterlab": "4.6.6"}).status == "WARN"


def test_root():
    assert sc.check_root(1000).status == "PASS"
    root = sc.check_root(0)
    assert root.status == "WARN" and "--allow-root" in root.fix


# -------------------------------------------------------------------------------------------- the command


def test_make_check_module_prints_every_line_and_a_summary():
    done = subprocess.run([sys.executable, "-m", "helpers.setup_check"], capture_output=True, text=True, timeout=120)
    lines = done.stdout.strip().splitlines()
    statuses = [line.split()[0] for line in lines[1:-1] if not line.startswith(" ")]
    assert set(statuses) <= {"PASS", "WARN", "FAIL"} and len(statuses) == 13, done.stdout
    assert done.returncode == (1 if "FAIL" in statuses else 0)
    assert "Traceback" not in done.stdout + done.stderr
    assert lines[-1].startswith(f"{statuses.count('PASS')} PASS, {statuses.count('WARN')} WARN")
    methods = next(line for line in lines if line[6:].startswith("start methods"))
    assert methods.startswith("PASS") and "fork child answered" in methods and "spawn child answered" in methods


def test_arguments_are_refused():
    assert sc.main(["--what"]) == 2
