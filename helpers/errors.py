"""Turn errors and captured output into short lines that read the same on every machine and every run.

A notebook's stored output is compared strictly by nbval, so anything printed from an error must not carry
what changes between runs: absolute paths (site-packages, `/tmp/ipykernel_<pid>/...`), process ids and
memory addresses. Several torch errors also start with blank lines, and a DataLoader wraps a worker's
error in a paragraph, so "the first line" needs a definition; it lives here, once.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["clean", "error_line", "short_error", "captured_stderr"]

# An absolute path of at least two parts: keep only its last part, which is what a reader needs.
_PATH = re.compile(r"(?<![\w.])(?:/[\w.@+~-]+){2,}/?")
_HEX = re.compile(r"0x[0-9a-fA-F]{4,}")
_PIDS = re.compile(r"\b(pid\(s\)|pids?|PID)([ =:]+)\d+(?:\s*,\s*\d+)*")
# "ValueError: ...", "torch.multiprocessing.spawn.ProcessRaisedException: ...", "KeyboardInterrupt"
_ERROR_START = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Refused)\w*)(:|$)")


def clean(text: str) -> str:
    """Replace paths by their last part, addresses by `0x…` and process ids by `N`."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    text = _PATH.sub(lambda m: "…/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)
    text = _HEX.sub("0x…", text)
    return _PIDS.sub(lambda m: f"{m.group(1)}{m.group(2)}N", text)


def _first_paragraph(lines: list[str]) -> str:
    """The first block of non-blank lines, joined into one line."""
    words: list[str] = []
    for line in lines:
        if line.strip():
            words.append(line.strip())
        elif words:
            break
    return " ".join(words)


def _error_lines(lines: list[str]) -> list[str]:
    found = []
    for i, line in enumerate(lines):
        match = _ERROR_START.match(line.strip())
        if match:
            head = line.strip()
            if head.endswith(":") or head == match.group(1):
                rest = _first_paragraph(lines[i + 1 :])
                head = f"{match.group(1)}: {rest}" if rest else match.group(1)
            found.append(clean(head))
    return found


def error_line(text: str, pick: str = "last") -> str:
    """The line of a traceback or log that names the error, cleaned; '' when there is none.

    A line that starts with an exception name; when the message itself starts on a later line (torch and
    multiprocessing often write `RuntimeError:` then a blank line), the paragraph after it is joined to
    it. `pick="last"` takes the last such line (the outcome of one traceback); `pick="most_common"` the
    one that occurs most often, first seen on ties: several processes writing to one file (pool workers
    dying again and again) interleave their tracebacks and end with whatever the last one to die wrote.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if pick not in ("last", "most_common"):
        raise ValueError(f"pick must be 'last' or 'most_common', got {pick!r}")
    found = _error_lines(text.splitlines())
    if not found:
        return ""
    if pick == "last":
        return found[-1]
    return max(found, key=lambda line: (found.count(line), -found.index(line)))


def short_error(exc: BaseException, line: str = "first") -> str:
    """`Type: message line` for an exception, cleaned of paths, PIDs and addresses.

    `line="first"` takes the first non-blank line of the message (what a DataLoader or spawn error puts
    up front); `line="last"` takes the last one (the original error at the end of a wrapped traceback).
    """
    if not isinstance(exc, BaseException):
        raise TypeError(f"exc must be an exception, got {type(exc).__name__}")
    if line not in ("first", "last"):
        raise ValueError(f"line must be 'first' or 'last', got {line!r}")
    lines = [part.strip() for part in str(exc).splitlines() if part.strip()]
    message = (lines[0] if line == "first" else lines[-1]) if lines else ""
    name = type(exc).__name__
    if not message:
        return name
    if line == "last" and _ERROR_START.match(message):  # a wrapped traceback's last line names its error
        return clean(message)
    return clean(f"{name}: {message}")


_LOG_PREFIX = re.compile(r"^(?:\[rank\d+\]:)?\[[A-Z]\d{4} [\d:.]+ [^\]]*\]\s*")


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """Send this process's file descriptor 2 to a temporary file for the block; afterwards the list holds
    its lines, cleaned, without the C++ log prefix (time, thread, file). The DDP reducer and gloo write
    warnings straight to fd 2, bypassing Python; in a rank under Jupyter that output would land in the
    notebook on one run and not on another, so ranks return it instead."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            text = f.read().decode(errors="replace")
            lines.extend(clean(_LOG_PREFIX.sub("", line)).strip() for line in text.splitlines() if line.strip())
