"""Every process that failed, read from the command's stderr, and which one failed first.

A failing process's own message is quoted whole (every line of it, however long: torch often names the fix
at its end) and matched against the course's catalogue of errors (`helpers.catalogue`). Who failed is read
from the way each launcher reports a child's error:

* torchrun: each rank's lines start with `[rankN]:`; its summary names the root cause (the first failure,
  by the error files' timestamps) under "Root Cause", the ranks it ended afterwards under "Failures";
* torch.multiprocessing.spawn: "-- Process N terminated with the following error:" then that rank's
  traceback (the first one spawn saw fail);
* a DataLoader: "Caught X in DataLoader worker process N." then "Original Traceback";
* a multiprocessing Pool (and ProcessPoolExecutor): the worker's traceback inside `RemoteTraceback:` and triple quotes,
  before the main process's traceback at the `map`/`get` line that re-raised it;
* a multiprocessing.Process: "Process Process-1:" then its traceback;
* native code: "terminate called after throwing an instance of 'X'" then "what():  message";
* the main process: the traceback that none of these claims.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from helpers import catalogue
from helpers.catalogue import Entry

_EXC = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Refused|Warning|Pool)\w*)(?::(.*)|$)")
_TB = "Traceback (most recent call last):"
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_LOG = re.compile(r"^[WEIF]\d{4} \d\d:\d\d:\d\d")  # torch's and glog's log lines
_RANK_LINE = re.compile(r"^\[rank(\d+)\]:(.*)$", re.MULTILINE)
_SPAWN = re.compile(r"-- Process (\d+) terminated with the following error:\n")
_CAUGHT = re.compile(
    r"Caught (\w+) in DataLoader worker process (\d+)\.\nOriginal Traceback \(most recent call last\):\n"
)
_REMOTE = re.compile(
    r"(multiprocessing\.pool\.RemoteTraceback|concurrent\.futures\.process\._RemoteTraceback): \n\"\"\"\n"
)
_PROCESS = re.compile(r"^Process ([\w:-]+):\n(?=Traceback)", re.MULTILINE)
_NATIVE = re.compile(r"terminate called after throwing an instance of '([^']+)'\n\s*what\(\):\s*(.*)")
_USAGE = re.compile(r"^usage: .*\n(?:[ \t].*\n)*\S+: error: .*$", re.MULTILINE)
# a child of spawn/forkserver that failed before its target ran (importing the script again, unpickling): its
# traceback starts in `python -c` and runs through spawn_main or the forkserver's main. Searched in the whole
# traceback, not only the next lines: two children failing at once can interleave their tracebacks line by line.
_STRING_MAIN = 'File "<string>", line 1, in <module>'
_SPAWN_FRAME = re.compile(
    r'multiprocessing[/\\](?:spawn\.py", line \d+, in spawn_main|forkserver\.py", line \d+, in main)'
)
_ROOT = re.compile(
    r"Root Cause \(first observed failure\):\n\[\d+\]:\n(?:.*\n)*?\s*rank\s*:\s*(\d+) \(local_rank: (\d+)\)\n"
    r"\s*exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)(?:.*\n)(?:\s*error_file: (.*)\n)?(?:\s*traceback\s*:\s*(.*))?"
)
_FAILURES = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\n\s*exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)")


@dataclass
class Failure:
    """One process's failure: who, its whole message, its traceback, and the user's innermost frame."""

    who: str  # "rank 1", "DataLoader worker 0", "a pool worker", "child process Process-1", "the main process"
    message: str  # the whole exception message, every line
    traceback: str = ""
    frame: str = ""  # `name (file:line)` of the innermost frame of the user's own code
    at: int = 0  # where it starts on stderr (earlier is first, unless a launcher says otherwise)
    entry: Entry | None = None
    notes: list[str] = field(default_factory=list)

    def first_line(self) -> str:
        """The message's first line; when it ends with ":" (torch's "Error(s) in loading state_dict for X:"),
        with the next two non-empty lines too."""
        lines = [line.strip() for line in self.message.strip().splitlines() if line.strip()]
        if not lines:
            return ""
        if lines[0].startswith("usage:"):  # argparse: the line that says what is wrong
            return next((line for line in lines if ": error: " in line), lines[0])
        return " ".join(lines[:3]) if lines[0].endswith(":") else lines[0]


def _library(path: str) -> bool:
    parts = path.split("/")
    return (
        "site-packages" in parts
        or "dist-packages" in parts
        or any(re.fullmatch(r"python3\.\d+", p) for p in parts)
        or path.startswith("<")
    )


def user_frame(text: str) -> str:
    """`name (file:line)` of the innermost frame of the user's own code in a traceback, or ''."""
    frames = [(f, ln, n) for f, ln, n in _FILE_LINE.findall(text) if not _library(f)]
    if not frames:
        return ""
    file, line, name = frames[-1]
    if name in _COMPREHENSIONS:  # a comprehension's own frame (3.11): name the function around it
        name = next((n for f, _, n in reversed(frames[:-1]) if f == file and n not in _COMPREHENSIONS), name)
    return f"{name} ({os.path.basename(file)}:{line})"


_COMPREHENSIONS = ("<listcomp>", "<genexpr>", "<dictcomp>", "<setcomp>", "<lambda>")


def _ends(line: str) -> bool:
    """A line that cannot belong to an exception's message: the start of another record."""
    return (
        line.startswith((_TB, "During handling of the above exception", "The above exception was the direct cause"))
        or bool(_LOG.match(line))
        or bool(_RANK_LINE.match(line))
        or line.startswith("Process ")
        and line.rstrip().endswith(":")
        or line.startswith('"""')
    )


def traceback_message(text: str) -> tuple[str, str]:
    """(the traceback, the whole message of its exception) of the first traceback in `text`; the message
    runs from the exception's line to the next record (another traceback, a log line), every line kept."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(_TB)), None)
    if start is None:
        return "", ""
    i = start + 1
    while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
        i += 1
    if i >= len(lines) or not _EXC.match(lines[i]):
        return "\n".join(lines[start:i]), ""
    end = i + 1
    while end < len(lines) and not _ends(lines[end]):
        end += 1
    message = "\n".join(lines[i:end]).rstrip()
    return "\n".join(lines[start:i]), message


def _strip_rank(text: str, rank: int) -> str:
    return "\n".join(
        m.group(2)[1:] if m.group(2).startswith(" ") else m.group(2)
        for m in _RANK_LINE.finditer(text)
        if int(m.group(1)) == rank
    )


def _match(failure: Failure) -> Failure:
    """The catalogue's entry for the message; failing that, for the traceback and message together (some
    entries need the frames: an OSError raised while fetching a shared tensor)."""
    failure.entry = catalogue.match(failure.message) or (
        catalogue.match(failure.traceback + "\n" + failure.message) if failure.traceback else None
    )
    return failure


def find(stderr: str) -> list[Failure]:
    """Every failure on stderr, in the order they were written (the launcher's root cause is marked)."""
    found: list[Failure] = []
    claimed: list[tuple[int, int]] = []  # spans of stderr already read as a child's

    ranks = sorted({int(m.group(1)) for m in _RANK_LINE.finditer(stderr)})
    for rank in ranks:
        own = _strip_rank(stderr, rank)
        tb, message = traceback_message(own)
        first = next(m for m in _RANK_LINE.finditer(stderr) if int(m.group(1)) == rank)
        if message or own.strip():
            found.append(_match(Failure(f"rank {rank}", message or own.strip(), tb, user_frame(tb), first.start())))
    for m in _SPAWN.finditer(stderr):
        tb, message = traceback_message(stderr[m.end() :])
        claimed.append((m.start(), m.end() + len(tb) + len(message) + 2))
        if not any(f.who == f"rank {m.group(1)}" for f in found):
            found.append(_match(Failure(f"rank {m.group(1)}", message, tb, user_frame(tb), m.start())))
    for m in _CAUGHT.finditer(stderr):
        tb, message = traceback_message(_TB + "\n" + stderr[m.end() :])
        claimed.append((m.start(), m.end() + len(tb) + len(message)))
        found.append(_match(Failure(f"DataLoader worker {m.group(2)}", message, tb, user_frame(tb), m.start())))
    for m in _REMOTE.finditer(stderr):
        close = stderr.find('"""', m.end())
        body = stderr[m.end() : close if close >= 0 else len(stderr)]
        tb, message = traceback_message(body)
        claimed.append((m.start(), close + 3 if close >= 0 else len(stderr)))
        kind = "a Pool worker" if "multiprocessing.pool" in m.group(1) else "a ProcessPoolExecutor worker"
        found.append(_match(Failure(kind, message, tb, user_frame(tb), m.start())))
    for m in _PROCESS.finditer(stderr):
        tb, message = traceback_message(stderr[m.end() :])
        claimed.append((m.start(), m.end() + len(tb) + len(message) + 1))
        found.append(_match(Failure(f"child process {m.group(1)}", message, tb, user_frame(tb), m.start())))
    aborted = re.findall(r"process (\d+) terminated with signal SIGABRT", stderr)
    for m in _NATIVE.finditer(stderr):
        message = f"{m.group(1)}: {m.group(2).strip()}"
        who = f"rank {aborted[0]}" if len(aborted) == 1 else "a process (native code)"
        found.append(_match(Failure(who, message, "", "", m.start(), notes=["it aborted (SIGABRT)"])))
    for m in _USAGE.finditer(stderr):
        claimed.append((m.start(), m.end()))
        found.append(_match(Failure("a process of the command", m.group(0).strip(), "", "", m.start())))
    # the main process: tracebacks no child claimed and not prefixed by a rank
    for m in re.finditer(re.escape(_TB), stderr):
        if any(a <= m.start() < b for a, b in claimed) or _line_prefixed(stderr, m.start()):
            continue
        tb, message = traceback_message(stderr[m.start() :])
        who = "a spawn child, at start-up" if _spawn_start(tb, message) else "the main process"
        first_line = message.strip().splitlines()[0] if message.strip() else ""
        if message and not any(f.first_line() == first_line and f.who != "the main process" for f in found):
            found.append(_match(Failure(who, message, tb, user_frame(tb), m.start())))
    return sorted(found, key=lambda f: f.at)


def _spawn_start(tb: str, message: str) -> bool:
    """A traceback that starts in `python -c` and runs through spawn's or the forkserver's main. Interleaved
    with another child's, its frames can land after the other's exception line, in what reads as the message."""
    return _STRING_MAIN in tb and bool(_SPAWN_FRAME.search(tb + "\n" + message))


def _line_prefixed(text: str, at: int) -> bool:
    start = text.rfind("\n", 0, at) + 1
    return text[start:at].startswith("[rank")


@dataclass
class RootCause:
    """torchrun's summary: the root cause rank and how it ended, and the other ranks it lists."""

    rank: int
    code: int
    pid: int
    traceback: str
    others: list[tuple[int, int, int]]  # (rank, exit code, pid) under "Failures"


def torchrun_root(stderr: str) -> RootCause | None:
    m = _ROOT.search(stderr)
    if m is None:
        return None
    failures = stderr[: m.start()]
    at = failures.rfind("Failures:")
    others = [(int(r), int(c), int(p)) for r, c, p in _FAILURES.findall(failures[at:])] if at >= 0 else []
    return RootCause(int(m.group(1)), int(m.group(3)), int(m.group(4)), (m.group(6) or "").strip(), others)


def first(failures: list[Failure], stderr: str) -> Failure | None:
    """The failure to explain: torchrun's root cause when it names one; else the earliest on stderr that is
    not only the consequence of another (the main process re-raising a child's error, a rank whose peer
    closed the connection, a launcher's summary)."""
    if not failures:
        return None
    root = torchrun_root(stderr)
    if root is not None:
        named = [f for f in failures if f.who == f"rank {root.rank}"]
        if named:
            return named[0]
        usage = [f for f in failures if f.who == "a process of the command" and f.entry is not None]
        if usage and root.code == 2:  # argparse's exit code: the root cause rank's own usage error
            usage[0].who = f"rank {root.rank}"
            usage[0].notes.append(
                f"the same usage error {len(usage)} time(s) on stderr: every rank parsed the same line"
            )
            return usage[0]
    spawned = _SPAWN.search(stderr)
    if spawned:
        named = [f for f in failures if f.who == f"rank {spawned.group(1)}"]
        if named:
            return named[0]
    children = [f for f in failures if f.who != "the main process"]
    causes = [f for f in children if not (f.entry and f.entry.id in _CONSEQUENCES)]
    for group in (causes, children, failures):
        if group:
            return group[0]
    return None


# errors that report another process's failure, not a cause of their own
_CONSEQUENCES = {
    "gloo-peer-closed",
    "gloo-peer-reset",
    "spawn-process-raised",
    "spawn-process-signal",
    "spawn-process-exit",
    "child-failed",
    "dataloader-worker-exited",
    "monitored-barrier-peer",
    "broken-process-pool",
    "mp-timeout",
}
