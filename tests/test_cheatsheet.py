"""CHEATSHEET.md and INSTRUCTORS.md: every link to a notebook names an existing notebook and heading.

Links use JupyterLab's anchors: a rendered heading's id is its text with each space replaced by "-"
(`createHeaderId` in @jupyterlab/rendermime: `textContent.replace(/ / g, "-")`), so `## 2. Threads vs
processes: the GIL` is `#2.-Threads-vs-processes:-the-GIL`. Headings change while the notebooks are
edited; a renamed one fails here with the headings that exist now.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = [REPO / "CHEATSHEET.md", REPO / "INSTRUCTORS.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)\)")  # one level of (...) in the target
# Characters that JavaScript's encodeURI (which marked applies to link targets) leaves as they are: any
# other character would reach JupyterLab percent-encoded and no longer equal the heading's id.
URI_SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789;,/?:@&=+$-_.!~*'()")


def rendered_text(heading: str) -> str:
    """A markdown heading's text as the browser shows it: code spans keep their content, emphasis
    markers and link targets disappear, entities are decoded."""
    parts = re.split(r"(`[^`]*`)", heading)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) >= 2:
            out.append(part[1:-1])
        else:
            part = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", part)
            out.append(html.unescape(part.replace("**", "").replace("*", "")))
    return "".join(out).strip()


def anchors(notebook: Path) -> set[str]:
    """JupyterLab's id of every heading in the notebook's markdown cells (outside code fences)."""
    found = set()
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        fenced = False
        for line in "".join(cell["source"]).splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            match = re.match(r"^#{1,6} +(.+?)\s*#*\s*$", line)
            if match and not fenced:
                found.add(rendered_text(match.group(1)).replace(" ", "-"))
    return found


def notebook_links(document: Path) -> list[tuple[str, str]]:
    """(path, fragment) of every link from `document` into notebooks/."""
    links = []
    for target in LINK.findall(document.read_text()):
        if target.startswith("notebooks/"):
            path, _, fragment = target.partition("#")
            links.append((path, fragment))
    return links


def test_anchor_rule_matches_jupyterlab():
    assert rendered_text("4. `persistent_workers`: start-up once, and a **stale** dataset") == (
        "4. persistent_workers: start-up once, and a stale dataset"
    )
    assert rendered_text("See [the docs](https://x.org) &amp; more") == "See the docs & more"


def test_the_cheatsheet_has_glossary_links_into_every_notebook():
    linked = {path for path, _ in notebook_links(REPO / "CHEATSHEET.md")}
    assert len(notebook_links(REPO / "CHEATSHEET.md")) >= 30
    existing = {f"notebooks/{p.name}" for p in (REPO / "notebooks").glob("0[0-6]_*.ipynb")}
    assert existing <= linked, f"no glossary link into {sorted(existing - linked)}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=[d.name for d in DOCUMENTS])
def test_every_notebook_link_resolves_to_a_heading(document):
    for path, fragment in notebook_links(document):
        notebook = REPO / path
        assert notebook.is_file(), f"{document.name} links to {path}, which does not exist"
        if not fragment:
            continue
        assert set(fragment) <= URI_SAFE, f"{document.name}: {fragment!r} would be percent-encoded in a link"
        ids = anchors(notebook)
        assert fragment in ids, f"{document.name}: no heading {fragment!r} in {path}; its headings: {sorted(ids)}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=[d.name for d in DOCUMENTS])
def test_other_local_links_exist(document):
    for target in LINK.findall(document.read_text()):
        if "://" in target or target.startswith(("#", "notebooks/", "mailto:")):
            continue
        assert (REPO / target.partition("#")[0]).exists(), f"{document.name} links to missing {target}"


def test_the_error_rows_are_the_catalogues():
    """The cheat sheet's error table is generated from helpers.catalogue, the one list of errors that the
    website's error index and diagnose read too (issue 39)."""
    from helpers import catalogue

    text = (REPO / "CHEATSHEET.md").read_text()
    start = text.index("<!-- generated from helpers/catalogue")
    block = text[text.index("\n", start) + 1 : text.index("<!-- end of generated rows -->")]
    assert block == catalogue.cheatsheet_rows(catalogue.CHEATSHEET) + "\n", (
        "regenerate with `python -m helpers.catalogue --cheatsheet`"
    )
