"""helpers/catalogue/errors.toml: every entry is a real message of the installed torch or Python, and the
catalogue knows every error the notebooks show.

- each pattern matches its example, and the file named as where it is raised contains the entry's literal
  (torch's .py files, the compiled libraries for C++ messages, the standard library, or the repository);
- each `section` and `see` names an existing notebook heading (JupyterLab's anchor: the heading's text,
  spaces made dashes); a `section` (shown live) has a stored output in that section that matches;
- every error line in the notebooks' stored outputs (stream, error and text outputs) is matched by an entry.

The notebooks are edited by others while this runs: a renamed heading fails with the headings that exist.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import sysconfig
from pathlib import Path

import pytest
from test_cheatsheet import rendered_text  # a heading as JupyterLab renders it: its anchor's text

import helpers.catalogue as catalogue
from helpers.catalogue import entries

REPO = Path(__file__).resolve().parent.parent
# CATALOGUE_NOTEBOOKS: another folder of notebooks to check (e.g. a `git show` of the committed ones while
# the working tree's are being regenerated)
NOTEBOOKS = sorted(Path(os.environ.get("CATALOGUE_NOTEBOOKS", REPO / "notebooks")).glob("[0-9][0-9]_*.ipynb"))
TORCH = Path(__import__("torch").__file__).parent
STDLIB = Path(sysconfig.get_paths()["stdlib"])
ERROR_NAME = re.compile(r"(?<![\w.])((?:[a-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt))(?=: |$)")
CODE = re.compile(r"^\s*(?:raise |except |with |print\(|return |#)|\(f\"|f\"")


def resolve(spec: str) -> list[Path]:
    kind, _, rest = spec.partition(":")
    if kind == "torch":
        return [TORCH / rest]
    if kind == "stdlib":
        return [Path(p) for p in glob.glob(str(STDLIB / rest))]
    if kind == "repo":
        return [REPO / rest]
    if kind == "libpython":
        lib = Path(sysconfig.get_config_var("LIBDIR") or "") / (sysconfig.get_config_var("INSTSONAME") or "")
        return [lib] if lib.is_file() else [Path(sysconfig.get_config_var("BINDIR") or "") / "python3"]
    raise ValueError(f"unknown file kind in {spec!r}")


@functools.cache
def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def _output_text(output: dict) -> str:
    if output["output_type"] == "stream":
        return "".join(output["text"])
    if output["output_type"] == "error":
        return f"{output['ename']}: {output['evalue']}"
    data = output.get("data", {})
    return "".join(data.get("text/plain", "")) if "text/plain" in data else ""


def sections(notebook: Path) -> dict[str, list[str]]:
    """Each `## ` heading's anchor and the text of the stored outputs of the cells under it."""
    found: dict[str, list[str]] = {"": []}
    current = ""
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("## "):
                    current = rendered_text(line[3:]).replace(" ", "-")
                    found.setdefault(current, [])
        elif cell["cell_type"] == "code":
            found[current] += [_output_text(o) for o in cell.get("outputs", [])]
    return found


def error_lines(text: str) -> list[str]:
    """Each error a stored output shows: from the exception's name to the end of its line (not source code
    that a cell prints)."""
    found = []
    for line in text.splitlines():
        if CODE.search(line):
            continue
        name = ERROR_NAME.search(line)
        if name:
            found.append(line[name.start() :].strip())
    return found


def test_enough_entries_with_unique_ids() -> None:
    ids = [e.id for e in entries()]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    outside = [e for e in entries() if e.library != "course"]
    assert len(outside) >= 80, len(outside)
    assert {e.library for e in entries()} <= set(catalogue.LIBRARIES)
    for entry in entries():
        assert entry.where(), f"{entry.id}: no section, see or docs"
        assert entry.cause and entry.fix and entry.raised, entry.id


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e.id)
def test_each_entry_is_a_real_message(entry: catalogue.Entry) -> None:
    assert entry.regex.search(entry.example), f"{entry.id}: the pattern does not match its example"
    files = resolve(entry.file)
    assert files and all(f.is_file() for f in files), f"{entry.id}: no file {entry.file} ({files})"
    assert any(entry.literal.encode() in _bytes(f) for f in files), (
        f"{entry.id}: {entry.literal!r} is not in {entry.file}: the message is not raised there"
    )


def _notebook_sections() -> dict[str, dict[str, list[str]]]:
    return {f"notebooks/{nb.name}": sections(nb) for nb in NOTEBOOKS}


def _has_outputs(notebook: Path) -> bool:
    cells = json.loads(notebook.read_text())["cells"]
    return any(cell.get("outputs") for cell in cells if cell["cell_type"] == "code")


@pytest.mark.parametrize("entry", [e for e in entries() if e.section or e.see], ids=lambda e: e.id)
def test_each_section_exists_and_a_live_one_shows_the_error(entry: catalogue.Entry) -> None:
    all_sections = _notebook_sections()
    for where in (entry.section, entry.see):
        if not where:
            continue
        notebook, _, anchor = where.partition("#")
        assert notebook in all_sections, f"{entry.id}: no notebook {notebook}"
        assert anchor in all_sections[notebook], (
            f"{entry.id}: {notebook} has no heading #{anchor} (renamed?); its headings now: "
            + ", ".join(a for a in all_sections[notebook] if a)
        )
    if entry.section:
        notebook, _, anchor = entry.section.partition("#")
        path = next(nb for nb in NOTEBOOKS if f"notebooks/{nb.name}" == notebook)
        assert _has_outputs(path), f"{entry.id}: {notebook} has no stored outputs at all (being regenerated?)"
        outputs = "\n".join(all_sections[notebook][anchor])
        assert entry.regex.search(outputs), (
            f"{entry.id}: no stored output of {entry.section} matches {entry.pattern!r}: the section does not "
            "show it live (make it `see`, or point `section` at the one that does)"
        )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_catalogue_knows_every_error_the_notebook_shows(notebook: Path) -> None:
    unknown = []
    for anchor, outputs in sections(notebook).items():
        for text in outputs:
            for line in error_lines(text):
                if not catalogue.match_all(line, include_course=True):
                    unknown.append(f"#{anchor}: {line[:200]}")
    assert not unknown, "error lines the catalogue does not know:\n" + "\n".join(unknown)


def test_match_prefers_the_most_specific_entry_and_skips_the_course_by_default() -> None:
    text = "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed."
    assert catalogue.match(text).id == "dataloader-killed-by-signal"
    assert catalogue.match("KeyError: 3") is None
    assert catalogue.match("KeyError: 3", include_course=True).id == "course-demo-errors"
    assert catalogue.match("nothing known here") is None
    with pytest.raises(TypeError, match="message must be a str"):
        catalogue.match(None)  # type: ignore[arg-type]


def test_error_index_groups_by_library_and_links_each_entry() -> None:
    page = catalogue.error_index_markdown()
    assert page.startswith("# Error index")
    for library in catalogue.LIBRARIES[:-1]:
        assert f"\n## {library}\n" in page, library
    assert "## course" not in page
    for entry in entries():
        if entry.library != "course":
            assert f"Catalogue entry `{entry.id}`:" in page
    assert "](../notebooks/06_deadlocks_and_pitfalls.ipynb#" in page


def test_cheatsheet_rows() -> None:
    rows = catalogue.cheatsheet_rows(("address-in-use", "context-already-set"))
    lines = rows.splitlines()
    assert lines[0].startswith("| message |") and len(lines) == 4
    assert "The server socket has failed to listen" in lines[2] and "06 §6" in lines[2]
    with pytest.raises(ValueError, match="ids: no catalogue entry named nope"):
        catalogue.cheatsheet_rows(("nope",))
    assert len(catalogue.cheatsheet_rows().splitlines()) > 10


def test_the_sites_error_index_is_the_catalogues() -> None:
    """site/error_index.md is generated (`python -m helpers.catalogue`): regenerate it after editing the TOML."""
    page = (REPO / "site" / "error_index.md").read_text()
    assert page == catalogue.error_index_markdown() + "\n", "site/error_index.md is stale: python -m helpers.catalogue"


def test_the_command_answers_help_and_refuses_an_unknown_option(tmp_path, monkeypatch, capsys) -> None:
    """`--help` once wrote the error index into a file named "--help"."""
    from helpers.catalogue.__main__ import main

    monkeypatch.chdir(tmp_path)
    for argv, code in ((["--help"], 0), (["--bogus"], 2)):
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        assert stopped.value.code == code
    assert list(tmp_path.iterdir()) == [] and "usage: python -m helpers.catalogue" in capsys.readouterr().out
    assert main([str(tmp_path / "index.md")]) == 0 and (tmp_path / "index.md").read_text().startswith("#")
