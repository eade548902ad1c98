"""The website's own code (site/_ext/course_site.py), without a browser: what it does to a notebook, how
it finds cross-references, and that the cheat sheet's JupyterLab anchors exist as the site makes them.
The last test builds a two-chapter site with Sphinx (skipped where requirements-site.txt is not installed);
tests/browser/site_check.py checks the real site in Chromium."""

import copy
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_PATH = REPO / "site" / "_ext" / "course_site.py"
_spec = importlib.util.spec_from_file_location("course_site", _PATH)
course_site = importlib.util.module_from_spec(_spec)
sys.modules["course_site"] = course_site
_spec.loader.exec_module(course_site)

CHAPTERS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
WIDGET = "application/vnd.jupyter.widget-view+json"


def _nb(*cells):
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {"widgets": {"state": {}}}, "cells": list(cells)}


def _md(source, id_="m"):
    return {"cell_type": "markdown", "id": id_, "metadata": {}, "source": source}


def _code(source, id_="c", outputs=(), hidden=False):
    metadata = {"jupyter": {"source_hidden": True}} if hidden else {}
    return {
        "cell_type": "code",
        "id": id_,
        "metadata": metadata,
        "source": source,
        "outputs": list(outputs),
        "execution_count": 1,
    }


def _refs(text, here=None):
    return [(piece, target) for piece, target in course_site.split_cross_references(text, here) if target]


def _source(cell):
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def test_cross_references_in_the_forms_the_chapters_use():
    assert _refs("see 06 §4 and 05 §8's two-node jobs") == [("06 §4", ("06", "4")), ("05 §8", ("05", "8"))]
    assert _refs("(notebook 00, section 4) and notebook 01 §8") == [
        ("notebook 00, section 4", ("00", "4")),
        ("notebook 01 §8", ("01", "8")),
    ]
    assert _refs("notebook 02's log, as in notebook 05.") == [
        ("notebook 02", ("02", None)),
        ("notebook 05", ("05", None)),
    ]
    assert _refs("(see 02)") == [("02", ("02", None))]
    assert _refs("section 4 (§4) and §11's rows", here="06") == [("§4", ("06", "4")), ("§11", ("06", "11"))]


def test_no_cross_reference_where_there_is_none():
    assert _refs("§4 of this guide") == []  # a bare section sign without a chapter to belong to
    assert _refs("in 2026 we saw 10.06 s, 3 of 40 lost, x86_64, pid 12345, 99% of runs") == []
    assert _refs("see 02.5 s and see 2 runs") == []


def test_pieces_put_back_together_give_the_text():
    text = "The §11 rows point to 04 §6, which shows each API (notebook 07, section 6)."
    assert "".join(piece for piece, _ in course_site.split_cross_references(text, "06")) == text


def test_the_cheat_sheets_links_name_headings_the_site_gives_those_anchors():
    link = re.compile(r"\]\(notebooks/(\d\d_\w+\.ipynb)#((?:[^()\s]|\([^()]*\))+)\)")  # an anchor may hold "()"
    links = link.findall((REPO / "CHEATSHEET.md").read_text())
    assert links
    anchors = {}
    for path in CHAPTERS:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "markdown":
                for title in re.findall(r"^#{1,3} (.+)$", _source(cell), re.MULTILINE):
                    anchors.setdefault(path.name, set()).add(course_site.jupyterlab_anchor(title.replace("`", "")))
    missing = [f"{name}#{anchor}" for name, anchor in links if anchor not in anchors.get(name, set())]
    assert not missing


def test_a_solution_is_collapsed_and_the_notebook_file_is_not_changed():
    nb = _nb(_md("# 00 · Title\n\nIntro"), _code("my_x = None", "p"), _code("# Solution\nsolution_x = 1", "s"))
    before = copy.deepcopy(nb)
    page = course_site.site_notebook(nb, "notebooks/00_orientation")
    assert nb == before
    assert page["cells"][2]["metadata"]["tags"] == ["hide-input"]
    assert "tags" not in page["cells"][1]["metadata"]
    assert "widgets" not in page["metadata"]
    title, _, rest = _source(page["cells"][0]).partition("\n")
    assert title == "# 00 · Title" and "`make lab`" in rest and "00_orientation.ipynb" in rest
    assert "2-core Linux machine" in rest and rest.rstrip().endswith("Intro")


def test_the_learner_edition_has_no_solution_but_keeps_outputs():
    out = {"output_type": "stream", "name": "stdout", "text": "Not yet: write my_x"}
    solution = _code("solution_x = 41 + 1\nchecks.x(solution_x)", "s", hidden=True)
    nb = _nb(_md("# 00 · Title"), _code("my_x = None\nchecks.x(my_x)", "p", [out]), solution)
    page = course_site.site_notebook(nb, "notebooks/00_orientation", "learner")
    text = json.dumps(page)
    assert "41 + 1" not in text and "hide-input" not in text
    assert page["cells"][1]["outputs"] == [out]
    assert "not in this learner edition" in _source(page["cells"][2])


def test_a_widget_becomes_a_note_and_a_progress_bar_its_text():
    widget = {"output_type": "display_data", "data": {WIDGET: {"model_id": "a"}, "text/plain": "interactive(children="}}
    bar = {"output_type": "display_data", "data": {WIDGET: {"model_id": "b"}, "text/plain": "100%|##| 4/4 [00:01]"}}
    text = {"output_type": "execute_result", "data": {"text/plain": "HBox(children=(IntSlider(value=2),))"}}
    nb = _nb(_md("# T"), _code("interact(f)", outputs=[widget, bar, text]))
    page = course_site.site_notebook(nb, "notebooks/01_x")
    outputs = page["cells"][1]["outputs"]
    assert outputs[0]["data"] == {"text/plain": course_site.WIDGET_NOTE}
    assert outputs[1]["data"] == {"text/plain": "100%|##| 4/4 [00:01]"}
    assert outputs[2]["data"] == {"text/plain": course_site.WIDGET_NOTE}


def test_a_widget_cell_stored_without_output_gets_the_note():
    cells = [
        _code("from ipywidgets import IntSlider\ninteract_manual(\n    f,\n    n=IntSlider(),\n);", "w"),
        _code("# interact(f)"),
    ]
    page = course_site.site_notebook(_nb(_md("# T"), *cells), "notebooks/01_x")
    assert page["cells"][1]["outputs"][0]["data"] == {"text/plain": course_site.WIDGET_NOTE}
    assert page["cells"][2]["outputs"] == []


def test_every_real_chapter_collapses_each_solution_and_the_learner_page_drops_it():
    from helpers.student import is_solution

    for path in CHAPTERS:
        nb = json.loads(path.read_text())
        docname = f"notebooks/{path.stem}"
        solutions = [_source(c) for c in nb["cells"] if is_solution(c)]
        full = course_site.site_notebook(nb, docname)
        tagged = [_source(c) for c in full["cells"] if "hide-input" in c["metadata"].get("tags", [])]
        assert tagged == solutions, path.name
        learner = json.dumps(course_site.site_notebook(nb, docname, "learner"))
        assert not [s for s in solutions if json.dumps(s)[1:-1] in learner], path.name


def test_the_table_of_contents_takes_every_chapter_in_order(tmp_path):
    (tmp_path / "notebooks").mkdir()
    for name in ("09_new.ipynb", "00_a.ipynb", "01_b.ipynb", "notes.ipynb"):
        (tmp_path / "notebooks" / name).write_text("{}")
    assert course_site.chapters(tmp_path) == ["notebooks/00_a", "notebooks/01_b", "notebooks/09_new"]
    assert "notebooks/00_a\nnotebooks/01_b\nnotebooks/09_new" in course_site.toctree(tmp_path)


def test_the_learner_edition_leaves_the_instructors_guide_out(tmp_path):
    text = "See [INSTRUCTORS.md](INSTRUCTORS.md) and [its triage](INSTRUCTORS.md#triage), [sheet](CHEATSHEET.md)."
    assert course_site.unlink_left_out(text, "full") == text
    assert course_site.unlink_left_out(text, "learner") == "See INSTRUCTORS.md and its triage, [sheet](CHEATSHEET.md)."
    for page in ("CHEATSHEET.md", "INSTRUCTORS.md"):
        (tmp_path / page).write_text("# x")
    assert "INSTRUCTORS" in course_site.toctree(tmp_path, "full")
    assert "INSTRUCTORS" not in course_site.toctree(tmp_path, "learner")
    assert "CHEATSHEET" in course_site.toctree(tmp_path, "learner")


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="edition"):
        course_site.site_notebook(_nb(), "notebooks/00_a", "teacher")
    with pytest.raises(TypeError, match="nb"):
        course_site.site_notebook([], "notebooks/00_a")
    with pytest.raises(ValueError, match="docname"):
        course_site.run_note("CHEATSHEET")
    with pytest.raises(TypeError, match="title"):
        course_site.jupyterlab_anchor(None)
    with pytest.raises(TypeError, match="text"):
        list(course_site.split_cross_references(b"06 \xa74", None))
    with pytest.raises(TypeError, match="docname"):
        course_site.notebook_number(6)
    with pytest.raises(ValueError, match="edition"):
        course_site.unlink_left_out("", "student")


def _small_site(tmp_path, second_text):
    """A two-chapter project with the site's extension: 00 has sections 1 and 2, 01 says `second_text`."""
    (tmp_path / "notebooks").mkdir()
    first = _nb(_md("# 00 · First\n\n## 1. Start here\n\nText.\n\n## 2. Then this\n\nAs §1 says.", "a"))
    second = _nb(_md(f"# 01 · Second\n\n{second_text}", "b"))
    (tmp_path / "notebooks" / "00_first.ipynb").write_text(json.dumps(first))
    (tmp_path / "notebooks" / "01_second.ipynb").write_text(json.dumps(second))
    (tmp_path / "README.md").write_text("# Course\n\nStart with `00_first`.\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "setup.md").write_text("# Setup\n\nEach chapter's run note links here.\n")
    (tmp_path / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(_PATH.parent)!r})\nsys.path.insert(0, {str(REPO)!r})\n"
        "extensions = ['myst_nb', 'course_site']\nroot_doc = 'README'\nnb_execution_mode = 'off'\n"
        "myst_heading_anchors = 3\nmyst_heading_slug_func = 'course_site.jupyterlab_anchor'\n"
        "exclude_patterns = ['_build']\n"
    )


def test_a_small_site_links_its_chapters_sections(tmp_path):
    """Sphinx builds two chapters and a page; the cross-references become links to the sections."""
    sphinx_main = pytest.importorskip("sphinx.cmd.build").main
    pytest.importorskip("myst_nb")
    _small_site(tmp_path, "Builds on notebook 00, section 2 and 00 §1 (see 00).")
    out = tmp_path / "_build"
    assert sphinx_main(["-q", "-b", "html", "-W", str(tmp_path), str(out)]) == 0
    second_html = (out / "notebooks" / "01_second.html").read_text()
    assert re.search(r'href="00_first.html#then-this">notebook 00, section 2</a>', second_html)
    assert re.search(r'href="00_first.html#start-here">00 §1</a>', second_html)
    assert re.search(r'href="00_first.html">00</a>', second_html)
    assert re.search(r'href="#start-here">§1</a>', (out / "notebooks" / "00_first.html").read_text())
    assert 'id="2.-Then-this"' in (out / "notebooks" / "00_first.html").read_text()
    readme = (out / "README.html").read_text()
    assert re.search(r'href="notebooks/00_first.html"><code[^>]*><span class="pre">00_first', readme)


def test_a_stale_cross_reference_fails_the_build(tmp_path, capsys):
    """A section or chapter that does not exist (renumbered, or not written yet) is a warning, which
    fails `make site` (-W), instead of plain text nobody notices."""
    sphinx_main = pytest.importorskip("sphinx.cmd.build").main
    pytest.importorskip("myst_nb")
    _small_site(tmp_path, "See 00 §7 and notebook 05. (You may see 12 workers: no reference.)")
    assert sphinx_main(["-q", "-b", "html", "-W", "--keep-going", str(tmp_path), str(tmp_path / "_build")]) != 0
    err = capsys.readouterr().err
    assert "'00 §7' names section 7 of notebooks/00_first" in err and "'notebook 05' names notebook 05" in err
    assert "'12'" not in err


def _site_check():
    path = REPO / "tests" / "browser" / "site_check.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("site_check", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["site_check"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_browser_check_finds_a_broken_anchor_and_a_cross_reference_to_the_wrong_section(tmp_path):
    site_check = _site_check()
    root = "http://127.0.0.1:1/"
    target = site_check.Visit(url="notebooks/06_x.html", ids={"queues", "fork"}, headings={"queues": "4. Queues"})
    source = site_check.Visit(url="INSTRUCTORS.html")
    source.links = [
        {"href": root + "notebooks/06_x.html#queues", "text": "06 §4", "xref": True},
        {"href": root + "notebooks/06_x.html#fork", "text": "06 §1", "xref": True},
        {"href": root + "notebooks/06_x.html#gone", "text": "a section", "xref": False},
        {"href": "https://example.org/", "text": "outside", "xref": False},
    ]
    report = site_check.lab_check.Report()
    site_check.check_links(report, {"INSTRUCTORS.html": source, "notebooks/06_x.html": target}, root, tmp_path, "full")
    assert len(report.failures) == 2
    assert "#gone" in report.failures[0] and "'06 §1'" in report.failures[1] and "#queues" not in report.failures[1]


def test_the_browser_checks_server_serves_the_folder_and_closes_its_port(tmp_path):
    import urllib.request

    site_check = _site_check()
    (tmp_path / "index.html").write_text("<p>hello</p>")
    with site_check.serve(tmp_path) as root:
        assert root.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(root + "index.html", timeout=10) as response:
            assert response.read() == b"<p>hello</p>"
        port = int(root.rstrip("/").rsplit(":", 1)[1])
    assert not site_check.lab_check._listening(port)
    assert site_check._page_path(root + "notebooks/", root) == "notebooks/index.html"
    assert site_check._page_path(root + "a%20b.html#x", root) == "a b.html"


def test_the_browser_check_knows_each_chapters_plots_and_solutions():
    site_check = _site_check()
    from helpers.student import is_solution

    for path in CHAPTERS:
        cells = json.loads(path.read_text())["cells"]
        facts = site_check.notebook_facts(path, site_check.course_text())
        assert facts["images"] == sum("image/png" in o.get("data", {}) for c in cells for o in c.get("outputs", []))
        assert len(facts["solutions"]) == sum(map(is_solution, cells)) > 0
        assert all(line not in site_check.course_text() for line in facts["own_lines"])
