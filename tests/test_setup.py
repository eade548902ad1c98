"""The setup commands: the CPU build of torch where PyPI would give a CUDA one, with a quick fallback, and
JupyterLab as root. pip is stubbed: on this machine pip's own configuration finds torch in a local wheel
folder, so a real install would succeed without ever reaching PyTorch's index and prove nothing."""

from __future__ import annotations

import http.server
import importlib.util
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("install_torch", ROOT / "tools" / "install_torch.py")
install_torch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_torch)

_STUB = """#!{python}
import sys
from pathlib import Path
args = sys.argv[1:]
if args[:1] == ["-c"]:
    sys.exit(0)  # 'which torch is installed?': none
Path({log!r}).write_text(" ".join(args))
"""


@pytest.fixture
def stub_python(tmp_path: Path) -> tuple[str, Path]:
    """A stand-in for the venv's Python that records the pip command it is given and installs nothing."""
    log = tmp_path / "pip-args"
    stub = tmp_path / "python"
    stub.write_text(_STUB.format(python=sys.executable, log=str(log)))
    stub.chmod(0o755)
    return str(stub), log


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connecting is refused at once


def test_pin_comes_from_requirements():
    assert install_torch.torch_pin() == "torch==2.13.0"


@pytest.mark.parametrize(
    ("build", "system", "machine", "expected"),
    [
        ("cpu", "Linux", "x86_64", True),
        ("default", "Linux", "x86_64", False),
        ("cpu", "Darwin", "arm64", False),
        ("cpu", "Linux", "aarch64", False),
    ],
)
def test_only_linux_x86_64_needs_the_cpu_index(build, system, machine, expected):
    assert install_torch.wants_cpu_index(build, system, machine) is expected


def test_a_bad_torch_build_is_a_clear_error(stub_python, capsys, monkeypatch):
    monkeypatch.setattr(install_torch.platform, "system", lambda: "Linux")
    python, log = stub_python
    assert install_torch.main(python, {"TORCH_BUILD": "gpu"}) == 2
    assert "TORCH_BUILD must be 'cpu' or 'default', got 'gpu'" in capsys.readouterr().err
    assert not log.exists()


def test_unreachable_index_falls_back_quickly_with_a_notice(stub_python, capsys, monkeypatch):
    monkeypatch.setattr(install_torch.platform, "system", lambda: "Linux")
    monkeypatch.setattr(install_torch.platform, "machine", lambda: "x86_64")
    python, log = stub_python
    index = f"http://127.0.0.1:{_closed_port()}/whl/cpu"
    t0 = time.monotonic()
    assert install_torch.main(python, {"TORCH_CPU_INDEX": index}) == 0
    assert time.monotonic() - t0 < install_torch.PROBE_TIMEOUT
    err = capsys.readouterr().err
    assert "notice: PyTorch's CPU package index" in err and "cannot be reached" in err
    assert not log.exists()  # pip was not run with the unreachable index: requirements.txt installs torch
    assert "CUDA build of several GB" not in err  # it says what happens, not what might


def test_report_names_the_build_installed(tmp_path):
    assert install_torch.build_installed(sys.executable).startswith("installed torch 2.13.0")
    assert "the CPU build" in install_torch.build_installed(sys.executable)
    missing = tmp_path / "python"
    missing.write_text("#!/bin/sh\nexit 1\n")
    missing.chmod(0o755)
    assert "torch is not installed" in install_torch.build_installed(str(missing))


def test_reachable_index_installs_torch_alone_from_it(stub_python, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(install_torch.platform, "system", lambda: "Linux")
    monkeypatch.setattr(install_torch.platform, "machine", lambda: "x86_64")
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "index.html").write_text("<a>torch-2.13.0+cpu</a>")

    def handler(*args, **kwargs):
        return http.server.SimpleHTTPRequestHandler(*args, directory=str(tmp_path / "site"), **kwargs)

    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        python, log = stub_python
        index = f"http://127.0.0.1:{server.server_address[1]}"
        assert install_torch.main(python, {"TORCH_CPU_INDEX": index}) == 0
    finally:
        server.shutdown()
        server.server_close()
    assert log.read_text().split() == [
        "-m", "pip", "install", "--disable-pip-version-check", "--no-deps", "--index-url", index, "torch==2.13.0",
    ]  # fmt: skip
    assert "TORCH_BUILD=default" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize(("uid", "root"), [("0", True), ("1000", False)])
def test_make_lab_adds_allow_root_only_as_root(uid, root):
    done = subprocess.run(
        ["make", "-n", "-W", "requirements.txt", "lab", f"USER_ID={uid}", "LAB_ARGS=--no-browser"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    lab = [line for line in done.stdout.splitlines() if "jupyter lab" in line and "echo" not in line]
    assert lab and lab[-1].endswith("--no-browser")  # the user's LAB_ARGS kept
    assert ("--allow-root" in lab[-1]) is root
