"""The browser check's own logic, without a browser: finding Chromium and reading page states."""

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parent / "browser" / "lab_check.py"
_spec = importlib.util.spec_from_file_location("lab_check", _PATH)
lab_check = importlib.util.module_from_spec(_spec)
sys.modules["lab_check"] = lab_check  # dataclasses look their module up there
_spec.loader.exec_module(lab_check)


def _cell(index, source, shown=(), outputs=()):
    return {"index": index, "type": "code", "source": source, "shown": list(shown), "outputs": list(outputs)}


def _shown(text="", mime="text/plain"):
    return {"mime": mime, "text": text, "widget": False}


def _out(kind="stream", name="stdout"):
    return {"type": kind, "name": name}


def test_no_chromium_says_how_to_install_and_exits_non_zero(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("CHROMIUM", raising=False)
    monkeypatch.setattr(lab_check, "CHROMIUM_CANDIDATES", (str(tmp_path / "missing"),))
    monkeypatch.setattr(lab_check.shutil, "which", lambda name: None)
    assert lab_check.main([str(lab_check.NOTEBOOKS / "00_orientation.ipynb")]) == 2
    assert "apt-get install -y chromium" in capsys.readouterr().err


def test_a_wrapper_script_is_not_taken_for_the_browser(monkeypatch, tmp_path):
    script = tmp_path / "chromium"
    script.write_text('#!/bin/sh\nexec /usr/lib/chromium/chromium "$@"\n')
    script.chmod(0o755)
    monkeypatch.delenv("CHROMIUM", raising=False)
    monkeypatch.setattr(lab_check, "CHROMIUM_CANDIDATES", ())
    monkeypatch.setattr(lab_check.shutil, "which", lambda name: str(script))
    assert lab_check.find_chromium() is None


def test_chromium_from_the_environment_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "nope"))
    with pytest.raises(SystemExit, match="not an executable"):
        lab_check.find_chromium()


def test_error_and_stderr_outputs_are_found_except_in_cells_that_must_raise():
    state = {
        "cells": [
            _cell(0, "print(1)", [_shown("1")], [_out()]),
            _cell(1, "warn()", [_shown("w", "application/vnd.jupyter.stderr")], [_out(name="stderr")]),
            _cell(2, "1/0", [_shown("ZeroDivisionError", "application/vnd.jupyter.error")], [_out("error", "")]),
            _cell(3, "# NBVAL_RAISES_EXCEPTION\n1/0", [_shown("E", "application/vnd.jupyter.error")], [_out("error")]),
            _cell(4, "w", [_shown("Error displaying widget: model not found")], [_out("display_data", "")]),
        ]
    }
    assert lab_check._cells_with_error(state) == [1, 2, 4]


def test_checker_cells_need_a_verdict():
    state = {
        "cells": [
            _cell(0, "checks.seed(my_fn)", [_shown("Not yet: write my_fn")]),
            _cell(1, "# Solution\ncheck = 1\nchecks.seed(solution_fn)", [_shown("Correct: yes")]),
            _cell(2, "checks.seed(my_fn)", [_shown("")]),
            _cell(3, "checks.seed(my_fn)", []),
            _cell(4, "print('not a checker')", []),
        ]
    }
    assert lab_check._verdictless_checkers(state) == [2, 3]
