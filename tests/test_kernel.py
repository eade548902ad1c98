import json
import subprocess
import sys

import pytest
from ipykernel.ipkernel import IPythonKernel

from helpers import kernel
from helpers.kernel import KERNEL_CLASS, CourseKernel, config_path, install


def test_language_info_is_the_same_on_every_python_3():
    info = CourseKernel.language_info
    assert info["version"] == "3"
    assert sys.version.split()[0] not in json.dumps(info)  # nothing of x.y.z left
    assert {k: v for k, v in info.items() if k != "version"} == {
        k: v for k, v in IPythonKernel.language_info.items() if k != "version"
    }


def test_install_writes_the_kernel_class_where_ipykernel_reads_it(tmp_path):
    path = install(tmp_path)
    assert path == tmp_path / "etc" / "ipython" / "ipython_kernel_config.json" == config_path(tmp_path)
    assert json.loads(path.read_text()) == {"IPKernelApp": {"kernel_class": KERNEL_CLASS}}
    assert install(tmp_path) == path  # idempotent
    assert json.loads(path.read_text()) == {"IPKernelApp": {"kernel_class": KERNEL_CLASS}}


def test_install_keeps_other_settings(tmp_path):
    path = config_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"IPKernelApp": {"matplotlib": "inline"}, "InteractiveShell": {"colors": "nocolor"}}))
    install(tmp_path)
    assert json.loads(path.read_text()) == {
        "IPKernelApp": {"matplotlib": "inline", "kernel_class": KERNEL_CLASS},
        "InteractiveShell": {"colors": "nocolor"},
    }


def test_install_rejects_bad_input(tmp_path):
    with pytest.raises(TypeError, match="prefix"):
        install(3)
    path = config_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        install(tmp_path)


def test_shutdown_stops_the_resource_tracker_without_signals():
    """A kernel that used spawn has a resource tracker child that ignores SIGTERM; the course kernel stops
    it the way multiprocessing does (closing its pipe), so shutdown does not wait out ipykernel's rounds."""
    code = """
import multiprocessing as mp, psutil
from multiprocessing import resource_tracker
from helpers import kernel
with mp.get_context("spawn").Pool(1) as pool:
    pool.map(abs, [1])
tracker = psutil.Process(resource_tracker._resource_tracker._pid)
kernel.stop_multiprocessing_helpers()
print("tracker gone:", not tracker.is_running() or tracker.status() == psutil.STATUS_ZOMBIE)
print("children left:", len(psutil.Process().children()))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[:2] == ["tracker gone: True", "children left: 0"], done.stderr
    assert "CourseKernel" in kernel.KERNEL_CLASS and hasattr(kernel.CourseKernel, "_at_shutdown")


def test_shutdown_with_a_live_queue_warns_of_no_leak():
    """A learner's queue still alive at shutdown is not a leak: its semaphores are released before the
    tracker stops, as a normal exit would release them."""
    code = """
import multiprocessing as mp
from helpers import kernel
q = mp.get_context("spawn").Queue()
q.put(1)
print(q.get())
kernel.stop_multiprocessing_helpers()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "1\n", done.stderr
    assert "leaked" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_imports_are_frozen_once_after_torch_is_loaded_and_later_garbage_is_still_collected():
    code = """
import gc
from helpers import kernel
print(kernel.freeze_imports(), gc.get_freeze_count() == 0)  # no torch yet: nothing frozen
import torch
print(kernel.freeze_imports(), gc.get_freeze_count() > 0, kernel.freeze_imports())
cycle = []
cycle.append(cycle)
del cycle
print(gc.collect() >= 1)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[:3] == ["False True", "True True False", "True"], done.stderr


def test_the_course_kernel_freezes_after_the_cell_that_imported_torch():
    """Through a real kernel of this environment (`make setup` installs the course's kernel class)."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        outputs = []
        for code in ("import gc, torch", "print(type(get_ipython().kernel).__name__, gc.get_freeze_count() > 0)"):
            kc.execute_interactive(code, timeout=60, output_hook=lambda msg: outputs.append(msg["content"]))
        assert any(o.get("text") == "CourseKernel True\n" for o in outputs), outputs
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
