"""What the course's website needs beyond Sphinx + MyST-NB, done at build time on the files as they are.

The notebooks are written for JupyterLab, and a few of their conventions mean nothing to Sphinx:
- a solution is collapsed by `"jupyter": {"source_hidden": true}`; MyST-NB collapses a cell tagged
  `hide-input`, so each solution cell gets that tag (the learner edition drops solutions instead, with
  `helpers.student.learner_notebook`, the same rule `make student` uses);
- chapters point at each other in prose ("06 §4", "notebook 00, section 3", "see 02"); on a website those
  should be links, to the section itself;
- the cheat sheet links to JupyterLab's heading anchors (`#4.-Queues:-joining-...`, the heading's text
  with spaces made dashes), so headings get those anchors here too;
- a stored widget needs a live kernel (and scripts from a CDN, which an offline site cannot load), so it
  becomes a plain note instead of its `interactive(children=...)` text.
Each notebook page also gets a note on how to run it and on where its measured numbers come from, and the
landing page (README.md) gets the table of contents in course order (every notebooks/NN_*.ipynb). The
learner edition leaves the instructors' guide out, and links to it become plain text.
Nothing here writes to a source file.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # docutils comes with Sphinx (requirements-site.txt); the functions above the hooks
    from docutils import nodes  # need neither, so the unit tests run in the course's own .venv too

NOTEBOOK_DOC = re.compile(r"^notebooks/(\d\d)_[A-Za-z0-9_]+$")
EDITIONS = ("full", "learner")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = (
    "(An interactive control is here in JupyterLab. It needs a running kernel, so this page cannot show it: "
    "run the notebook to use it.)"
)
WIDGET_TEXT = re.compile(r"^\s*(interactive|[HV]Box|Output|IntSlider|FloatSlider|Dropdown|Button|\w+Widget)\(")
INTERACT_CALL = re.compile(
    r"^\s*(?:\w+\s*=\s*)?(?:widgets\.)?interact(?:_manual)?\s*(?:\.options\(.*\))?\(", re.MULTILINE
)
SOLUTION_TAG = "hide-input"
# The chapters' ways of pointing at each other, longest first: "notebook 00 §3", "notebook 00, section 3",
# "06 §4", "notebook 02", "see 02". A bare "§4" means a section of the page it is on (notebooks only).
CROSS_REFERENCE = re.compile(
    r"(?P<nb_sec>notebook (?P<a>\d\d)(?: ?§ ?|, section )(?P<a_sec>\d+))"
    r"|(?P<short>(?<![\w.§-])(?P<b>\d\d) ?§ ?(?P<b_sec>\d+))"
    r"|(?P<nb>notebook (?P<c>\d\d))(?!\d|\.\d)"
    r"|(?P<see>(?<=\bsee )(?P<d>\d\d))(?!\d|\.\d|[:%])"
    r"|(?P<bare>(?<![\w§])§ ?(?P<e_sec>\d+))"
)
SECTION_TITLE = re.compile(r"^(\d+)\.\s")
CHAPTER_TITLE = re.compile(r"^(\d\d)\s")


def jupyterlab_anchor(title: str) -> str:
    """The id JupyterLab gives a heading: its text with every space made a dash (nothing else changes),
    so links written for JupyterLab (the cheat sheet's glossary) work on the site as they are."""
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type(title).__name__}")
    return title.strip().replace(" ", "-")


def notebook_number(docname: str) -> str | None:
    """'06' for 'notebooks/06_deadlocks_and_pitfalls', None for a page that is not a chapter."""
    if not isinstance(docname, str):
        raise TypeError(f"docname must be a str, got {type(docname).__name__}")
    match = NOTEBOOK_DOC.match(docname)
    return match.group(1) if match else None


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _plain_widget_outputs(cell: dict) -> None:
    """Replace each stored widget view, and any widget's repr text, by the plain note (in place); a
    widget cell stored without output (its output varies, so it is not kept) gets the note too."""
    if not cell.get("outputs") and INTERACT_CALL.search(_source(cell)):
        cell["outputs"] = [{"output_type": "display_data", "metadata": {}, "data": {"text/plain": WIDGET_NOTE}}]
        return
    for output in cell.get("outputs", []):
        data = output.get("data")
        if not isinstance(data, dict):
            continue
        plain = data.get("text/plain", "")
        plain = "".join(plain) if isinstance(plain, list) else plain
        if WIDGET_VIEW in data:
            data.pop(WIDGET_VIEW)
            if re.search(r"\d+%\|", plain):  # a tqdm bar: its text is its stored state
                continue
            data.clear()
            data["text/plain"] = WIDGET_NOTE
        elif WIDGET_TEXT.match(plain) and set(data) == {"text/plain"}:
            data["text/plain"] = WIDGET_NOTE


def run_note(docname: str) -> str:
    """The note at the top of a chapter's page: how to run it, and where its measured numbers come from."""
    if notebook_number(docname) is None:
        raise ValueError(f"docname must be a chapter such as 'notebooks/00_orientation', got {docname!r}")
    return (
        ":::{note}\n"
        f"**Run it yourself:** `make lab` in the course's folder, then open `{Path(docname).name}.ipynb` "
        "({doc}`the setup page </site/setup>` says more). "
        "**The numbers on this page** (times, speed-ups, loads, memory) come from one stored run on a 2-core "
        "Linux machine. Your own run will print different ones, and reading them is the point: each timing "
        "cell says what its numbers mean on the machine that ran it.\n"
        ":::\n"
    )


def site_notebook(nb: dict, docname: str, edition: str = "full") -> dict:
    """A copy of the notebook `nb` as the site shows it (the file itself is not changed).

    full: solution cells are tagged to be collapsed; learner: they are gone, as in `make student`, but the
    stored outputs stay (a website without outputs would show nothing). Both: widgets become a note, the
    notebook's widget state is dropped (the site would load its scripts from a CDN), and the run note
    follows the title.
    """
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise TypeError("nb must be a notebook (a dict with a list of cells)")
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, got {edition!r}")
    from helpers.student import is_solution, learner_notebook

    if edition == "learner":
        nb = learner_notebook(nb, keep_outputs=True)
    nb = copy.deepcopy(dict(nb))
    nb["metadata"] = {k: v for k, v in nb.get("metadata", {}).items() if k != "widgets"}
    for cell in nb["cells"]:
        if edition == "full" and is_solution(cell):
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if SOLUTION_TAG not in tags:
                tags.append(SOLUTION_TAG)
        if cell.get("cell_type") == "code":
            _plain_widget_outputs(cell)
    _add_run_note(nb, run_note(docname))
    return nb


def _add_run_note(nb: dict, note: str) -> None:
    """Right below the title: into the first cell after its `# ` line, else as a cell of its own."""
    first = nb["cells"][0] if nb["cells"] else None
    if first is not None and first.get("cell_type") == "markdown" and _source(first).startswith("# "):
        title, _, rest = _source(first).partition("\n")
        first["source"] = f"{title}\n\n{note}\n{rest}"
        return
    cell = {"cell_type": "markdown", "metadata": {}, "source": note}
    if any("id" in c for c in nb["cells"]):
        cell["id"] = "course-site-run-note"
    nb["cells"].insert(0, cell)


def chapters(srcdir: Path) -> list[str]:
    """Every chapter's docname in course order: notebooks/NN_*.ipynb, so a new chapter is picked up."""
    return [f"notebooks/{p.stem}" for p in sorted(Path(srcdir, "notebooks").glob("[0-9][0-9]_*.ipynb"))]


REFERENCE_PAGES = ("CHEATSHEET", "site/error_index", "INSTRUCTORS", "site/setup")
# The learner edition has no instructors' guide: it discusses the exercises' answers ("exercise 1:
# `max(1, cores // processes)`") and how to teach them.
LEARNER_LEAVES_OUT = ("INSTRUCTORS",)


def _left_out(docname: str, edition: str) -> bool:
    return edition == "learner" and docname in LEARNER_LEAVES_OUT


def unlink_left_out(markdown: str, edition: str) -> str:
    """`markdown` with each link to a page the edition leaves out replaced by the link's text."""
    if not isinstance(markdown, str):
        raise TypeError(f"markdown must be a str, got {type(markdown).__name__}")
    if edition not in EDITIONS:
        raise ValueError(f"edition must be one of {EDITIONS}, got {edition!r}")
    for page in LEARNER_LEAVES_OUT if edition == "learner" else ():
        markdown = re.sub(rf"\[([^\]]*)\]\({re.escape(page)}\.md(?:#[^)]*)?\)", r"\1", markdown)
    return markdown


def toctree(srcdir: Path, edition: str = "full") -> str:
    """The landing page's (hidden) tables of contents: the chapters in order, then the reference pages."""
    notebooks = "\n".join(chapters(srcdir))
    pages = "\n".join(p for p in REFERENCE_PAGES if Path(srcdir, f"{p}.md").is_file() and not _left_out(p, edition))
    text = "\n\n```{toctree}\n:hidden:\n:caption: Notebooks\n\n" + notebooks + "\n```\n"
    return text + ("\n```{toctree}\n:hidden:\n:caption: Reference\n\n" + pages + "\n```\n" if pages else "")


def split_cross_references(text: str, here: str | None) -> Iterator[tuple[str, tuple[str, str | None] | None]]:
    """`text` in pieces: (piece, None) for plain text, (piece, (notebook number, section or None)) for a
    cross-reference. `here` is the number of the chapter the text is on (for a bare "§4"), or None."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    position = 0
    for match in CROSS_REFERENCE.finditer(text):
        kind = next(k for k in ("nb_sec", "short", "nb", "see", "bare") if match.group(k))
        if kind == "nb_sec":
            target = (match.group("a"), match.group("a_sec"))
        elif kind == "short":
            target = (match.group("b"), match.group("b_sec"))
        elif kind == "nb":
            target = (match.group("c"), None)
        elif kind == "see":
            target = (match.group("d"), None)
        elif here is not None:
            target = (here, match.group("e_sec"))
        else:
            continue
        start, end = match.span(kind)
        if start > position:
            yield text[position:start], None
        yield text[start:end], target
        position = end
    if position < len(text):
        yield text[position:], None


# ------------------------------------------------------------------------------------------ Sphinx hooks


def _edition(app) -> str:
    edition = app.config.course_edition
    if edition not in EDITIONS:
        raise ValueError(f"course_edition (SITE_EDITION) must be one of {EDITIONS}, got {edition!r}")
    return edition


def on_source_read(app, docname: str, source: list[str]) -> None:
    """Notebooks become what the site shows; the landing page gets the tables of contents."""
    if notebook_number(docname) is not None:
        nb = json.loads(source[0])
        source[0] = json.dumps(site_notebook(nb, docname, _edition(app)))
    else:
        source[0] = unlink_left_out(source[0], _edition(app))
        if docname == app.config.root_doc:
            source[0] += toctree(Path(app.srcdir), _edition(app))


def on_doctree_read(app, doctree: nodes.document) -> None:
    """Remember where each numbered section of a chapter starts ("## 4. Queues ..." is section 4)."""
    from docutils import nodes

    docname = app.env.docname
    if notebook_number(docname) is None:
        return
    sections: dict[str, str] = {}
    for section in doctree.findall(nodes.section):
        title = section.next_node(nodes.title)
        match = SECTION_TITLE.match(title.astext()) if title is not None else None
        if match and section["ids"] and match.group(1) not in sections:
            sections[match.group(1)] = section["ids"][0]
    _store(app.env)[docname] = sections


def _store(env) -> dict[str, dict[str, str]]:
    if not hasattr(env, "course_sections"):
        env.course_sections = {}
    return env.course_sections


def on_purge_doc(app, env, docname: str) -> None:
    _store(env).pop(docname, None)


def on_merge_info(app, env, docnames, other) -> None:
    _store(env).update({d: s for d, s in _store(other).items() if d in docnames})


def _targets(env) -> dict[str, str]:
    return {notebook_number(d): d for d in _store(env)}


def _link(app, fromdoc: str, number: str, section: str | None, text: str) -> nodes.Node:
    """A reference to chapter `number` (its section `section`), or the plain text where there is none."""
    from docutils import nodes

    docname = _targets(app.env).get(number)
    if docname is None:
        if text.startswith("notebook") or "§" in text:  # "see 12 workers" is no cross-reference
            _warn(fromdoc, f"{text!r} names notebook {number}, which does not exist")
        return nodes.Text(text)
    uri = app.builder.get_relative_uri(fromdoc, docname)
    if section is not None:
        anchor = _store(app.env)[docname].get(section)
        if anchor is None:
            _warn(fromdoc, f"{text!r} names section {section} of {docname}, which has no heading '{section}. ...'")
            return nodes.Text(text)
        uri = f"{uri}#{anchor}" if docname != fromdoc else f"#{anchor}"
    return nodes.reference(text, text, refuri=uri, internal=True, classes=["course-xref"])


def _warn(docname: str, message: str) -> None:
    """A Sphinx warning (so `make site`, which runs with -W, fails): a stale cross-reference."""
    from sphinx.util import logging

    logging.getLogger(__name__).warning(message, location=docname, type="course", subtype="xref")


def on_doctree_resolved(app, doctree: nodes.document, docname: str) -> None:
    """Cross-references in prose become links; a chapter named in code (`00_orientation`) too."""
    from docutils import nodes

    # not in code, in a link already, in a heading (the tables of contents), or in raw HTML
    skip_inside = (nodes.literal, nodes.FixedTextElement, nodes.reference, nodes.title, nodes.raw)
    if app.builder.format != "html":
        return
    chapter = notebook_number(docname)
    for text in list(doctree.findall(nodes.Text)):
        parent = text.parent
        if parent is None or any(isinstance(a, skip_inside) for a in _ancestors(text)):
            continue
        pieces = list(split_cross_references(text.astext(), chapter or _chapter_of_section(text)))
        if not any(target for _, target in pieces):
            continue
        new = [nodes.Text(piece) if target is None else _link(app, docname, *target, piece) for piece, target in pieces]
        index = parent.index(text)
        parent.remove(text)
        for offset, node in enumerate(new):
            parent.insert(index + offset, node)
    stems = {Path(d).name: d for d in _store(app.env)}
    for literal in list(doctree.findall(nodes.literal)):
        target = stems.get(literal.astext().removesuffix(".ipynb"))
        if target and target != docname and not any(isinstance(a, nodes.reference) for a in _ancestors(literal)):
            link = nodes.reference("", "", refuri=app.builder.get_relative_uri(docname, target), internal=True)
            literal.replace_self(link)
            link.append(literal)


def _chapter_of_section(node: nodes.Node) -> str | None:
    """The chapter a section of another page is about, from its title ("06 Deadlocks and pitfalls" in
    INSTRUCTORS.md), so that a bare "§4" there points into notebook 06."""
    from docutils import nodes

    for ancestor in _ancestors(node):
        if isinstance(ancestor, nodes.section):
            title = ancestor.next_node(nodes.title)
            match = CHAPTER_TITLE.match(title.astext()) if title is not None else None
            if match:
                return match.group(1)
    return None


def _ancestors(node: nodes.Node) -> Iterator[nodes.Node]:
    node = node.parent
    while node is not None:
        yield node
        node = node.parent


def setup(app) -> dict[str, Any]:
    app.add_config_value("course_edition", "full", "env", types=[str])
    app.connect("source-read", on_source_read)
    app.connect("doctree-read", on_doctree_read)
    app.connect("env-purge-doc", on_purge_doc)
    app.connect("env-merge-info", on_merge_info)
    app.connect("doctree-resolved", on_doctree_resolved)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
