import json
import sys

import pytest
from ipykernel.ipkernel import IPythonKernel

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
