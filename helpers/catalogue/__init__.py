"""The course's one catalogue of error messages (issue 39): data in `errors.toml`, read here.

Three readers use it: `python -m helpers.diagnose` (which names a failing process's error from it), the
website's error index (`error_index_markdown`) and the cheat sheet's error rows (`cheatsheet_rows`). Each
entry holds a message pattern, where torch or Python raises it, the cause, the fix, and the section that
shows it live (or explains it, or a documentation link). tests/test_catalogue.py checks every entry
against the installed source and the notebooks' stored outputs.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli, pinned in requirements.txt
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = [
    "Entry",
    "entries",
    "match",
    "match_all",
    "link",
    "error_index_markdown",
    "cheatsheet_rows",
    "CHEATSHEET",
    "LIBRARIES",
]

_DATA = Path(__file__).with_name("errors.toml")
_FIELDS = {"id", "library", "pattern", "example", "file", "literal", "raised", "cause", "fix", "section", "see", "docs"}
_FIELDS |= {"title"}
# The order of the groups on the error index; "course" (the course's own demonstration messages) is not shown.
LIBRARIES = (
    "multiprocessing (Python)",
    "concurrent.futures",
    "pickle",
    "Python",
    "torch",
    "torch.multiprocessing",
    "DataLoader",
    "torch.distributed",
    "torchrun (torch.distributed.elastic)",
    "DDP",
    "FSDP",
    "course",
)


@dataclass(frozen=True)
class Entry:
    """One error of the catalogue (see the header of errors.toml for the fields)."""

    id: str
    library: str
    pattern: str
    example: str
    file: str
    literal: str
    raised: str
    cause: str
    fix: str
    section: str = ""  # notebooks/NN_name.ipynb#anchor: shows it live
    see: str = ""  # a section that explains it
    docs: str = ""  # a documentation link
    title: str = ""  # the error index's heading, where the example's own line would not do

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.MULTILINE)

    def where(self) -> str:
        """The course section (live first) or the documentation link: where to read more."""
        return self.section or self.see or self.docs


def _load(path: Path) -> tuple[Entry, ...]:
    with path.open("rb") as f:
        data = tomllib.load(f)
    found = []
    for raw in data.get("error", []):
        unknown = set(raw) - _FIELDS
        if unknown:
            raise ValueError(f"{path.name}: entry {raw.get('id')!r} has unknown fields {sorted(unknown)}")
        found.append(Entry(**raw))
    return tuple(found)


@functools.lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    """Every entry, in the file's order (read once)."""
    return _load(_DATA)


def _candidates(include_course: bool) -> tuple[Entry, ...]:
    return entries() if include_course else tuple(e for e in entries() if e.library != "course")


def match_all(message: str, include_course: bool = False) -> list[Entry]:
    """Every entry whose pattern is found in `message` (one process's error message or stderr). The
    course's own demonstration messages count only with `include_course` (they are not a learner's)."""
    if not isinstance(message, str):
        raise TypeError(f"message must be a str, got {type(message).__name__}")
    return [e for e in _candidates(include_course) if e.regex.search(message)]


def match(message: str, include_course: bool = False) -> Entry | None:
    """The most specific entry found in `message`: the one whose match is longest (a pattern that names
    more of the message knows more about it), the first in the file on a tie; None when none matches."""
    if not isinstance(message, str):
        raise TypeError(f"message must be a str, got {type(message).__name__}")
    best: tuple[int, Entry] | None = None
    for entry in _candidates(include_course):
        found = entry.regex.search(message)
        if found and (best is None or len(found.group(0)) > best[0]):
            best = (len(found.group(0)), entry)
    return best[1] if best else None


# What JavaScript's encodeURI leaves as it is: JupyterLab's markdown renderer encodes a link's target with it,
# so a heading id with any other character (a '"' in `if __name__ == "__main__":`) no longer matches.
_URI_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789;,/?:@&=+$-_.!~*'()#")


def link(entry: Entry, base: str = "", jupyterlab: bool = False) -> str:
    """`where` as a link target: a notebook section relative to `base` (e.g. "../" from site/), or a URL.
    With `jupyterlab` (a page read in JupyterLab too, such as the cheat sheet), a section whose anchor
    JupyterLab cannot reach is linked as its notebook alone."""
    where = entry.where()
    if where.startswith("http"):
        return where
    if jupyterlab and not set(where) <= _URI_SAFE:
        where = where.partition("#")[0]
    return base + where


def _section_label(where: str) -> str:
    if where.startswith("http"):
        return "documentation"
    notebook, _, anchor = where.partition("#")
    number = Path(notebook).name[:2]
    title = anchor.replace("-", " ")
    return f"{number} §{title.split('.')[0]}" if title[:1].isdigit() else f"{number}: {title}"


def _headline(entry: Entry) -> str:
    """The message's telling line without its exception name, as a heading the site's search ranks first."""
    if entry.title:
        return entry.title
    lines = [line.strip() for line in entry.example.strip().splitlines() if line.strip()]
    line = next((x for x in lines if ": error: " in x or "what():" in x), lines[-1] if len(lines) > 1 else lines[0])
    line = re.sub(r"^(?:[\w.]+(?:Error|Exception|Warning|Exit)|what\(\)|ERROR):\s*", "", line)
    line = re.sub(r"^\[[^\]]*\]\s*", "", line).replace("`", "'")
    return line if len(line) <= 100 else line[:100].rsplit(" ", 1)[0] + " …"


def error_index_markdown(base: str = "../notebooks/") -> str:
    """The website's error index: every entry but the course's own, grouped by library, each with the
    message, where it is raised, cause, fix and a link. `base` replaces "notebooks/" in section links."""
    lines = [
        "# Error index",
        "",
        "Paste an error message into the search box: each entry below is one message torch or Python prints, "
        "where it is raised, what it means, what to do, and the section of the course that shows it "
        "(generated from `helpers/catalogue/errors.toml`, which `python -m helpers.diagnose` reads too).",
        "",
    ]
    for library in LIBRARIES:
        group = [e for e in entries() if e.library == library and library != "course"]
        if not group:
            continue
        lines += [f"## {library}", ""]
        for entry in group:
            where = entry.where()
            target = where if where.startswith("http") else base + where.removeprefix("notebooks/")
            lines += [
                f"### {_headline(entry)}",
                "",
                f"Catalogue entry `{entry.id}`:",
                "",
                "```text",
                entry.example.strip(),
                "```",
                "",
                f"- **Raised in**: {entry.raised}",
                f"- **Cause**: {entry.cause}",
                f"- **Fix**: {entry.fix}",
                f"- **Read**: [{_section_label(where)}]({target})" + (" (shown live)" if entry.section else ""),
                "",
            ]
    return "\n".join(lines)


# The cheat sheet's error rows (one printable page): the messages learners meet most, in the course's order.
CHEATSHEET = (
    "context-already-set",
    "bootstrapping-phase",
    "cannot-get-attribute-main",
    "cannot-pickle-lambda",
    "dataloader-worker-exited",
    "dataloader-killed-by-signal",
    "dataloader-caught",
    "ancdata",
    "shm-allocate",
    "address-in-use",
    "gloo-recv-timeout",
    "gloo-peer-closed",
    "collective-mismatch",
    "ddp-unused-parameters",
    "child-failed",
)


def cheatsheet_rows(ids: tuple[str, ...] | None = None) -> str:
    """The cheat sheet's error table (markdown): message, cause, fix, section; `ids` picks and orders
    the rows (default: every entry the course shows live, the course's own excepted)."""
    by_id = {e.id: e for e in entries()}
    if ids is None:
        chosen = [e for e in entries() if e.section and e.library != "course"]
    else:
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise ValueError(f"ids: no catalogue entry named {', '.join(missing)}")
        chosen = [by_id[i] for i in ids]
    rows = ["| message | cause | fix | read |", "|---|---|---|---|"]
    for entry in chosen:
        message = _headline(entry).replace("|", "\\|")
        cause = entry.cause.split(": ")[0].split(". ")[0].replace("|", "\\|")
        fix = entry.fix.split(". ")[0].replace("|", "\\|")
        rows.append(
            f"| `{message}` | {cause} | {fix} | [{_section_label(entry.where())}]({link(entry, jupyterlab=True)}) |"
        )
    return "\n".join(rows)
