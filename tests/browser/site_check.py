"""The course's website, checked in a real headless Chromium: the second half of `make test-browser`.

Run it as `.venv/bin/python tests/browser/site_check.py` after `make site` and
`make site SITE_EDITION=learner` (the make target does all three). Like lab_check.py it is not a pytest
file: it needs a browser. Sphinx's own warnings (the build runs with -W) catch a link to a missing page
while building; this looks at what a reader gets. Each edition is served from its folder by Python's
http.server on 127.0.0.1 and a free port, in a thread, and closed at the end. It checks:
- every page loads with no console error, no failed request and no 404 for a page, image, stylesheet,
  script or font (so nothing is fetched from the network either: the site works offline);
- every link inside the site opens an existing page and, where it names one, an existing anchor; each
  cross-reference such as "06 §4" lands on the heading of that section;
- each notebook page shows every plot its notebook stores, as a loaded image, says how to run it and
  where its numbers come from, and shows no widget as `interactive(children=...)` text;
- each solution is collapsed (its code not visible) and opens on a click, showing the solution's code;
- the search page finds notebook 06's section 4 for "join before drain";
- the learner edition has no solution text on any page (and the full edition has it, so the check can fail);
- the server's port no longer listens once an edition is done.
Screenshots go to tests/browser/screenshots/site-*.png (a notebook page, the cheat sheet, the instructors'
guide, the landing page, a search and a learner page), and on failure the console log of the pages.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import html
import http.server
import json
import re
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lab_check  # noqa: E402  (the same Chromium, flags and report as the JupyterLab check)

REPO = lab_check.REPO
SITE = REPO / "build" / "site"
LEARNER_SITE = REPO / "build" / "site-learner"
SCREENSHOTS = lab_check.SCREENSHOTS
PAGE_TIMEOUT = 30.0  # s: one static page loading from 127.0.0.1
CHECKED_RESOURCES = {"document", "stylesheet", "image", "script", "font"}
SEARCH_QUERY = "join before drain"
SEARCH_TARGET = ("notebooks/06_deadlocks_and_pitfalls.html", "4.")
INTERACT_CALL = re.compile(r"^\s*(?:\w+\s*=\s*)?interact(?:_manual)?\(", re.MULTILINE)
WIDGET_NOTE = "An interactive control is here in JupyterLab"
WIDGET_TEXT = re.compile(r"\b(interactive|HBox|VBox|IntSlider|FloatSlider)\(children=|\bchildren=\(")
XREF_TEXT = re.compile(r"(?:(\d\d) ?)?§ ?(\d+)|notebook (\d\d), section (\d+)")
SHORTEST_SOLUTION_LINE = 16  # characters: shorter lines ("return x") also occur in other cells' prose

# Per page: what a reader can follow and where each link can land, read once the page has loaded.
PAGE_JS = r"""
() => {
  const ids = new Set();
  for (const el of document.querySelectorAll('[id]')) ids.add(el.id);
  for (const el of document.querySelectorAll('a[name]')) ids.add(el.getAttribute('name'));
  const headings = {};
  for (const h of document.querySelectorAll('h1, h2, h3, h4')) {
    const text = h.textContent.replace(/#$/, '').trim();
    const section = h.closest('section');
    for (const el of [h, section, ...(section ? section.querySelectorAll(':scope > span[id]') : [])]) {
      if (el && el.id) headings[el.id] = text;
    }
  }
  const links = Array.from(document.querySelectorAll('a[href]')).map(a => ({
    href: a.href, text: a.textContent.trim(), xref: a.classList.contains('course-xref')}));
  const main = document.querySelector('main') || document.body;
  const collapsed = document.querySelectorAll('details.hide.above-input').length;
  return {ids: Array.from(ids), headings, links, text: main.innerText, source: main.textContent, collapsed};
}
"""

OUTPUT_IMAGES_JS = r"""
() => Array.from(document.querySelectorAll('.cell_output img')).map(img => ({
  src: img.getAttribute('src'), loaded: img.complete && img.naturalWidth > 0,
  shown: img.offsetParent !== null}))
"""

SOLUTIONS_JS = r"""
() => Array.from(document.querySelectorAll('details.hide.above-input')).map(d => {
  const code = d.querySelector('pre');
  return {open: d.open, codeShown: !!code && code.checkVisibility(), code: code ? code.textContent : ''};
})
"""


@dataclass
class Visit:
    """What one page showed: its anchors, headings, links and text, and what went wrong while loading."""

    url: str
    ids: set[str] = field(default_factory=set)
    headings: dict[str, str] = field(default_factory=dict)
    links: list[dict] = field(default_factory=list)
    text: str = ""  # what a reader sees (innerText: not what a closed solution holds)
    source: str = ""  # everything the page holds (textContent)
    collapsed: int = 0  # collapsed cell inputs (MyST-NB's hide-input)
    problems: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- serving


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002  (the standard library's name)
        pass


@contextlib.contextmanager
def serve(folder: Path) -> Iterator[str]:
    """`folder` over HTTP on 127.0.0.1 and a free port, in a thread; the listener is closed on exit."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --------------------------------------------------------------------------------------------- the notebooks


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _output_text(output: dict) -> str:
    text = output.get("text", output.get("data", {}).get("text/plain", ""))
    return "".join(text) if isinstance(text, list) else str(text)


def course_text() -> str:
    """Everything of the course that is not a solution: the other cells of every notebook and the pages."""
    from helpers.student import is_solution

    parts = [(REPO / name).read_text() for name in ("README.md", "CHEATSHEET.md", "INSTRUCTORS.md")]
    for chapter in _chapters():
        cells = json.loads(chapter.read_text())["cells"]
        for cell in cells:
            if not is_solution(cell):
                parts.append(_source(cell))
                parts.extend(_output_text(o) for o in cell.get("outputs", []))  # e.g. a helper's source
    return "\n".join(parts)


def notebook_facts(path: Path, elsewhere: str = "") -> dict:
    """From a notebook file: how many plots it stores, its solutions' code, and each solution's lines
    that appear nowhere in `elsewhere` (the rest of the course): what a page without solutions must not
    contain."""
    from helpers.student import is_solution

    cells = json.loads(path.read_text())["cells"]
    solutions = [_source(c) for c in cells if is_solution(c)]
    own_lines = []
    for code in solutions:
        for line in code.splitlines():
            line = line.strip()
            if len(line) >= SHORTEST_SOLUTION_LINE and not line.startswith("#") and line not in elsewhere:
                own_lines.append(line)
    images = sum("image/png" in o.get("data", {}) for c in cells for o in c.get("outputs", []))
    widgets = sum(
        1 for c in cells if c["cell_type"] == "code" and not c.get("outputs") and INTERACT_CALL.search(_source(c))
    )
    markdown = "\n".join(_source(c) for c in cells if c["cell_type"] == "markdown")
    return {
        "images": images,
        "solutions": solutions,
        "own_lines": own_lines,
        "widgets": widgets,
        "diagrams": markdown.count("](figures/"),
        "asides": markdown.count("<details"),
    }


def _chapters() -> list[Path]:
    return sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


# --------------------------------------------------------------------------------------------- visiting


def _page_path(url: str, root: str) -> str:
    """'notebooks/06_x.html' for a URL of the site; a folder's URL names its index.html."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    path = path[len(urllib.parse.urlsplit(root).path) :]
    return path + "index.html" if path.endswith("/") or not path else path


def visit(page, url: str, root: str) -> Visit:
    """Load one page, collecting console errors, failed requests and HTTP errors while it loads."""
    result = Visit(url=_page_path(url, root))

    def on_console(message) -> None:
        if message.type == "error":
            result.problems.append(f"console error: {message.text[:300]}")

    def on_response(response) -> None:
        if response.status >= 400 and response.request.resource_type in CHECKED_RESOURCES:
            result.problems.append(f"HTTP {response.status} for {response.request.resource_type} {response.url}")

    def on_failed(request) -> None:
        result.problems.append(f"request failed: {request.resource_type} {request.url} ({request.failure})")

    handlers = {"console": on_console, "pageerror": lambda e: result.problems.append(f"page error: {e}")}
    handlers.update(response=on_response, requestfailed=on_failed)
    for event, handler in handlers.items():
        page.on(event, handler)
    try:
        page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT * 1000)
        page.wait_for_timeout(200)  # deferred scripts (the theme's) run after load
        state = page.evaluate(PAGE_JS)
    finally:
        for event, handler in handlers.items():
            page.remove_listener(event, handler)
    result.ids, result.headings, result.links = set(state["ids"]), state["headings"], state["links"]
    result.text, result.source, result.collapsed = state["text"], state["source"], state["collapsed"]
    return result


def site_pages(folder: Path) -> list[str]:
    """Every HTML page of a built site, relative to it (the theme's own files excluded)."""
    pages = (p.relative_to(folder) for p in folder.rglob("*.html"))
    return sorted(p.as_posix() for p in pages if not any(part.startswith("_") for part in p.parts))


def check_links(report: lab_check.Report, visits: dict[str, Visit], root: str, folder: Path, edition: str) -> None:
    """Every link inside the site lands on a page that exists and, with a #fragment, on an anchor in it;
    a chapter cross-reference ("06 §4") lands on that section's heading."""
    broken, wrong_xrefs, count, xrefs = [], [], 0, 0
    for source, seen in visits.items():
        for link in seen.links:
            if not link["href"].startswith(root):
                continue
            count += 1
            split = urllib.parse.urlsplit(link["href"])
            target = _page_path(link["href"], root)
            fragment = urllib.parse.unquote(split.fragment)
            if target not in visits:
                if not (folder / target).is_file():
                    broken.append(f"{source} -> {target} ({link['text'][:40]!r})")
                continue
            if fragment and fragment not in visits[target].ids:
                broken.append(f"{source} -> {target}#{fragment} ({link['text'][:40]!r})")
                continue
            match = XREF_TEXT.fullmatch(link["text"]) if link["xref"] else None
            if match:
                xrefs += 1
                number = match.group(1) or match.group(3)
                section = match.group(2) or match.group(4)
                heading = visits[target].headings.get(fragment, "")
                if not heading.startswith(f"{section}.") or (number and f"/{number}_" not in f"/{target}"):
                    wrong_xrefs.append(f"{source}: {link['text']!r} -> {target}#{fragment} ({heading[:40]!r})")
    report.check(
        not broken, f"{edition}: all {count} links inside the site open a page and anchor", "; ".join(broken[:10])
    )
    report.check(
        xrefs > 0 and not wrong_xrefs,
        f"{edition}: all {xrefs} section cross-references (such as '06 §4') land on that section's heading",
        "; ".join(wrong_xrefs[:10]) or "none found",
    )


def check_notebook_page(report: lab_check.Report, page, seen: Visit, facts: dict, name: str) -> None:
    """A chapter's page in the full edition: plots, run note, widgets, and collapsed solutions that open."""
    images = page.evaluate(OUTPUT_IMAGES_JS)
    report.check(
        len(images) == facts["images"] and all(i["loaded"] for i in images),
        f"{name}: its {facts['images']} stored plots render as loaded images",
        f"{len(images)} images, not loaded: {[i['src'] for i in images if not i['loaded']]}",
    )
    report.check(
        "make lab" in seen.text and "2-core Linux machine" in seen.text,
        f"{name}: says how to run it (make lab) and where its numbers come from",
    )
    report.check(not WIDGET_TEXT.search(seen.text), f"{name}: no widget shown as its repr text")
    if facts["widgets"]:
        notes = seen.text.count(WIDGET_NOTE)
        report.check(
            notes >= facts["widgets"],
            f"{name}: each of its {facts['widgets']} widgets stored without output shows the note instead",
            f"{notes} notes",
        )
    check_pictures_and_asides(report, page, facts, name)
    solutions = page.evaluate(SOLUTIONS_JS)
    shown = [i for i, s in enumerate(solutions) if s["open"] or s["codeShown"]]
    report.check(
        len(solutions) == len(facts["solutions"]) and not shown,
        f"{name}: its {len(facts['solutions'])} solutions are collapsed",
        f"{len(solutions)} collapsible inputs; open or shown: {shown}",
    )
    summaries = page.locator("details.hide.above-input > summary")
    opened = []
    for index in range(summaries.count()):
        summaries.nth(index).click()
        page.wait_for_timeout(100)
        opened.append(page.evaluate(SOLUTIONS_JS)[index])
    first_lines = [code.strip().splitlines()[0] for code in facts["solutions"]]
    report.check(
        len(opened) == len(first_lines)
        and all(
            s["open"] and s["codeShown"] and line in s["code"] for s, line in zip(opened, first_lines, strict=True)
        ),
        f"{name}: a click opens each solution and shows its code",
        f"opened {[s['open'] and s['codeShown'] for s in opened]}",
    )


DIAGRAMS_JS = r"""
() => Array.from(document.querySelectorAll('article img')).filter(i => /\/\d\d-[\w-]+\.(svg|gif)$/.test(i.src))
  .map(i => ({src: i.src, alt: i.alt, loaded: i.complete && i.naturalWidth > 0}))
"""
ASIDE = "article details:not(.hide)"  # the solutions' collapsibles are details.hide


def check_pictures_and_asides(report: lab_check.Report, page, facts: dict, name: str) -> None:
    """The chapter's diagrams load, with their alt text; its "Under the hood" asides are collapsed and one
    click on a summary shows the aside's text (issue 38)."""
    pictures = page.evaluate(DIAGRAMS_JS)
    bad = [p["src"] for p in pictures if not p["loaded"] or not p["alt"]]
    report.check(
        len(pictures) == facts["diagrams"] and not bad,
        f"{name}: its {facts['diagrams']} diagrams load, each with alt text",
        f"{len(pictures)} shown; not loaded or without alt: {bad}",
    )
    asides = page.locator(ASIDE)
    closed = asides.evaluate_all("ds => ds.every(d => !d.open)")
    report.check(
        asides.count() == facts["asides"] and closed,
        f"{name}: its {facts['asides']} asides are collapsed",
        f"{asides.count()} asides, all closed: {closed}",
    )
    if asides.count():
        aside = asides.first
        body = aside.locator(":scope > :not(summary)").first
        hidden = not body.is_visible()
        aside.locator(":scope > summary").click()
        page.wait_for_timeout(200)
        report.check(
            hidden and body.is_visible() and bool(body.inner_text().strip()),
            f"{name}: one click on an aside's summary shows its text",
        )


def check_search(report: lab_check.Report, page, root: str) -> None:
    """Sphinx's search (offline, in the page) finds notebook 06's section 4 for 'join before drain'."""
    page.goto(f"{root}search.html?q={urllib.parse.quote_plus(SEARCH_QUERY)}", timeout=PAGE_TIMEOUT * 1000)
    page.wait_for_function(
        "() => document.querySelectorAll('#search-results li').length > 0"
        " || /did not match/.test((document.querySelector('#search-results') || {}).textContent || '')",
        timeout=PAGE_TIMEOUT * 1000,
    )
    page.wait_for_timeout(1000)  # results arrive one by one
    results = page.evaluate(
        "() => Array.from(document.querySelectorAll('#search-results li a'))"
        ".map(a => ({href: a.href, text: a.textContent}))"
    )
    page_name, section = SEARCH_TARGET
    hits = [r for r in results if page_name in r["href"] and "#" in r["href"] and f"> {section}" in r["text"]]
    found = hits[0]["text"].split(">")[-1].strip()[:60] if hits else "none"
    report.check(
        bool(hits),
        f"search for {SEARCH_QUERY!r} returns 06's section 4 ({found})",
        f"results: {[r['text'][:50] for r in results[:8]]}",
    )
    _screenshot(page, "site-search")


# A message as a learner pastes it: with its own pid, which no page holds (the index's example has 4242).
PASTED_ERROR = "RuntimeError: DataLoader worker (pid 31337) is killed by signal: Killed."
PASTED_TARGET = ("site/error_index.html", "DataLoader worker (pid 4242) is killed by signal")


def check_error_search(report: lab_check.Report, page, root: str) -> None:
    """A whole error message pasted into the search finds its entry of the error index (issue 39)."""
    page.goto(f"{root}search.html?q={urllib.parse.quote_plus(PASTED_ERROR)}", timeout=PAGE_TIMEOUT * 1000)
    page.wait_for_function(
        "() => document.querySelectorAll('#search-results li').length > 0"
        " || /did not match/.test((document.querySelector('#search-results') || {}).textContent || '')",
        timeout=PAGE_TIMEOUT * 1000,
    )
    page.wait_for_timeout(1000)
    results = page.evaluate(
        "() => Array.from(document.querySelectorAll('#search-results li a'))"
        ".map(a => ({href: a.href, text: a.textContent}))"
    )
    target, title = PASTED_TARGET
    first = results[0] if results else {"href": "", "text": "no result"}
    report.check(
        target in first["href"] and "#" in first["href"] and title in first["text"],
        f"a pasted error message finds its entry in the error index first ({first['text'][:70]})",
        f"results: {[r['text'][:60] for r in results[:5]]}",
    )
    _screenshot(page, "site-error-search")


def _screenshot(page, name: str) -> Path:
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def check_edition(report: lab_check.Report, context, folder: Path, edition: str) -> dict[str, Visit]:
    """Every page of one edition: loading, links, and (full edition) the chapters' pages and search."""
    if not (folder / "README.html").is_file():
        report.check(False, f"{edition}: a built site in {folder}", "run `make site` (and SITE_EDITION=learner)")
        return {}
    visits: dict[str, Visit] = {}
    with serve(folder) as root:
        page = context.new_page()
        for path in site_pages(folder):
            seen = visit(page, root + path, root)
            visits[path] = seen
            report.check(not seen.problems, f"{edition}: {path} loads cleanly", "; ".join(seen.problems[:5]))
            if edition == "full" and path.startswith("notebooks/"):
                source = REPO / "notebooks" / Path(path).with_suffix(".ipynb").name
                if source.is_file():
                    check_notebook_page(report, page, seen, notebook_facts(source), f"{edition}: {path}")
        check_links(report, visits, root, folder, edition)
        if edition == "full":
            check_search(report, page, root)
            check_error_search(report, page, root)
            screenshots(page, root)
        else:
            page.goto(f"{root}notebooks/{_chapters()[0].stem}.html", timeout=PAGE_TIMEOUT * 1000)
            _screenshot(page, "site-learner-notebook")
        page.close()
    port = urllib.parse.urlsplit(root).port
    report.check(not lab_check._listening(port), f"{edition}: nothing listens on 127.0.0.1:{port} any more")
    return visits


def screenshots(page, root: str) -> None:
    """One picture per kind of page: a chapter (at an opened solution), the cheat sheet, the instructors'
    guide and the landing page."""
    chapter = _chapters()[min(6, len(_chapters()) - 1)].stem
    page.goto(f"{root}notebooks/{chapter}.html", timeout=PAGE_TIMEOUT * 1000)
    _screenshot(page, "site-notebook")
    summary = page.locator("details.hide.above-input > summary")
    if summary.count():
        summary.first.scroll_into_view_if_needed()
        summary.first.click()
        page.wait_for_timeout(300)
        _screenshot(page, "site-notebook-solution-open")
    for name, path in (("site-cheatsheet", "CHEATSHEET.html"), ("site-instructors", "INSTRUCTORS.html")):
        page.goto(root + path, timeout=PAGE_TIMEOUT * 1000)
        _screenshot(page, name)
    page.goto(root + "README.html", timeout=PAGE_TIMEOUT * 1000)
    _screenshot(page, "site-landing")


def check_no_solutions(
    report: lab_check.Report, full: dict[str, Visit], learner: dict[str, Visit], learner_folder: Path
) -> None:
    """No line of any solution's own code is on any learner page, or in any file of that edition (the
    search index included); each is on the full edition's page. The instructors' guide is left out."""
    leaks, missing = [], []
    learner_text = {path: " ".join(v.source.split()) for path, v in learner.items()}
    elsewhere, lines = course_text(), 0
    for chapter in _chapters():
        facts = notebook_facts(chapter, elsewhere)
        path = f"notebooks/{chapter.stem}.html"
        full_text = " ".join(full[path].source.split()) if path in full else ""
        for line in facts["own_lines"]:
            lines += 1
            wanted = " ".join(line.split())
            if wanted not in full_text:
                missing.append(f"{path}: {line[:50]!r}")
            leaks.extend(f"{page}: {line[:50]!r}" for page, text in learner_text.items() if wanted in text)
        if path not in learner:
            missing.append(f"learner edition has no {path}")
    report.check(
        lines > 0 and not missing, f"full edition: the {lines} solution lines are on its pages", "; ".join(missing[:5])
    )
    report.check(not leaks, "learner edition: no solution text on any page", "; ".join(leaks[:5]))
    files = [p for p in learner_folder.rglob("*") if p.is_file() and p.suffix in (".html", ".js", ".txt", ".ipynb")]
    wanted = [line for chapter in _chapters() for line in notebook_facts(chapter, elsewhere)["own_lines"]]
    in_files = sorted({p.relative_to(learner_folder).as_posix() for p in files for line in wanted if line in _read(p)})
    report.check(
        not in_files, f"learner edition: no solution text in any of its {len(files)} files", ", ".join(in_files)
    )
    report.check("INSTRUCTORS.html" not in learner, "learner edition: no instructors' guide")
    toggles = [p for p, v in learner.items() if v.collapsed]
    report.check(not toggles, "learner edition: no collapsed solution on any page", ", ".join(toggles))


@functools.cache
def _read(path: Path) -> str:
    """A file's text; an HTML file's without its tags (highlighted code is split into spans)."""
    text = path.read_text(errors="replace")
    return html.unescape(re.sub(r"<[^>]+>", "", text)) if path.suffix == ".html" else text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=SITE, help=f"the full edition (default {SITE})")
    parser.add_argument(
        "--learner", type=Path, default=LEARNER_SITE, help=f"the learner edition (default {LEARNER_SITE})"
    )
    args = parser.parse_args(argv)
    chromium = lab_check.find_chromium()
    if chromium is None:
        print(lab_check.INSTALL_HINT, file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("Playwright is missing: .venv/bin/python -m pip install -r requirements-browser.txt", file=sys.stderr)
        return 2
    SCREENSHOTS.mkdir(exist_ok=True)
    for old in SCREENSHOTS.glob("site-*"):
        old.unlink()
    report = lab_check.Report()
    started = time.monotonic()
    print(f"Chromium: {chromium}; sites: {args.site}, {args.learner}", flush=True)
    with tempfile.TemporaryDirectory(prefix="site-check-") as scratch, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(Path(scratch) / "chromium-profile"),
            executable_path=str(chromium),
            headless=True,
            args=lab_check.CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 1000},
        )
        try:
            full = check_edition(report, context, args.site.resolve(), "full")
            learner = check_edition(report, context, args.learner.resolve(), "learner")
            if full and learner:
                check_no_solutions(report, full, learner, args.learner.resolve())
        except Exception as error:  # a check that could not run is a failure, reported with the others
            report.check(False, "site check ran to the end", f"{type(error).__name__}: {str(error)[:500]}")
        finally:
            context.close()
    print(f"screenshots: {SCREENSHOTS}/site-*.png", flush=True)
    print(f"site check took {time.monotonic() - started:.0f} s", flush=True)
    print(f"{report.passed} passed, {len(report.failures)} failed", flush=True)
    for failure in report.failures:
        print(f"FAILED {failure}", flush=True)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
