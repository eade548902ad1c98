"""torch's Flight Recorder, read across ranks: which collective did each rank call, and where do they part?

Each rank keeps a ring buffer of its last collectives (sequence number, operation, sizes; on gloo too in
torch 2.13, 2,000 entries by default). A hang's stacks show where each rank waits now; the records show
the first collective where the ranks differ, which is where the desync began (a rank that skipped a
collective waits in the next one, whose name alone misleads).

How the records get here: diagnose gives the command `TORCH_FR_BUFFER_SIZE` (unless it sets its own) and
a FIFO, `fr-trigger`, in its private folder. `helpers/diagnose_site/sitecustomize.py`, in each process
that makes a process group, writes `fr-ready-<pid>.txt` and starts a thread that blocks opening that
FIFO; diagnose opens it at the deadline (or as soon as one rank of the job has ended, before its launcher
ends the others), every rank writes `fr-<pid>-rank<r>.pkl` (torch's own dump, `_dump_fr_trace`), and
the ranks that exit through Python write it on their way out. Reading the records as rows, one per
sequence number, is notebook 07's `side_by_side` (helpers/flight_records.py, which imports no torch).
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

TRIGGER = "fr-trigger"
BUFFER = "2000"  # entries per rank; torch 2.13's default for gloo, set in case another version has none
SECTION = '07_ddp_in_practice, section 7 "Finding the failing rank"'
_DUMP = re.compile(r"^fr-(\d+)-rank(\d+|unknown)\.pkl$")
_READY = re.compile(r"^fr-ready-(\d+)\.txt$")
_ERROR = re.compile(r"^fr-(\d+)\.err$")


def prepare(folder: Path, env: dict[str, str]) -> None:
    """Make the trigger FIFO in diagnose's folder and turn the recorder on in the command's environment,
    unless the command's environment sets its size itself (0 turns it off: respected, and said)."""
    if not isinstance(folder, Path):
        raise TypeError(f"folder must be a pathlib.Path, got {type(folder).__name__}")
    try:
        os.mkfifo(folder / TRIGGER, 0o600)
    except FileExistsError:
        pass
    except OSError:
        return  # no FIFO: sitecustomize then leaves torch alone, and the report has no recorder line
    if "TORCH_FR_BUFFER_SIZE" not in env and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env:
        env["TORCH_FR_BUFFER_SIZE"] = BUFFER


def ready(folder: Path) -> dict[int, int | None]:
    """pid -> rank (None: unknown) of every process that made a process group."""
    found: dict[int, int | None] = {}
    for path in folder.glob("fr-ready-*.txt"):
        match = _READY.match(path.name)
        if not match:
            continue
        words = path.read_text(errors="replace").split()
        rank = words[1] if len(words) > 1 else ""
        found[int(match.group(1))] = int(rank) if rank.lstrip("-").isdigit() else None
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def trigger(folder: Path) -> bool:
    """Wake every waiting rank (they block opening the FIFO for reading); False when none waits."""
    try:
        fd = os.open(folder / TRIGGER, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ENOENT):
            return False
        raise
    os.close(fd)
    return True


class Watch:
    """Called on each look at the running command: when a rank that made a group has ended and others
    still run, wake those once, so that they dump before their launcher ends them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.fired = False

    def look(self) -> None:
        if self.fired:
            return
        pids = ready(self.folder)
        if len(pids) < 2:
            return
        alive = [pid for pid in pids if _alive(pid)]
        if alive and len(alive) < len(pids):
            self.fired = True
            trigger(self.folder)


def collect(folder: Path, wait: float = 5.0) -> None:
    """At the deadline: wake every live rank and wait (up to `wait` s, less when all have written) for
    each one's dump. Never raises: the stacks come next, whatever happens here."""
    with contextlib.suppress(OSError, psutil.Error):
        _collect(folder, wait)


def _collect(folder: Path, wait: float) -> None:
    pids = [pid for pid in ready(folder) if _alive(pid)]
    if not pids:
        return
    asked = time.time() - 0.01
    if not trigger(folder):
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        done = {int(m.group(1)) for p in folder.iterdir() if (m := _DUMP.match(p.name)) and p.stat().st_mtime >= asked}
        done |= {int(m.group(1)) for p in folder.iterdir() if (m := _ERROR.match(p.name))}
        if all(pid in done or not _alive(pid) for pid in pids):
            return
        time.sleep(0.05)


@dataclass
class Dump:
    pid: int
    rank: int | None
    entries: list[dict[str, Any]] = field(default_factory=list)


def read(folder: Path) -> tuple[dict[int, Dump], list[str]]:
    """Each pid's newest dump, and the errors ranks wrote instead of one."""
    newest: dict[int, tuple[float, Path, str]] = {}
    for path in folder.iterdir():
        match = _DUMP.match(path.name)
        if match:
            pid, mtime = int(match.group(1)), path.stat().st_mtime
            if pid not in newest or mtime > newest[pid][0]:
                newest[pid] = (mtime, path, match.group(2))
    dumps = {}
    for pid, (_, path, rank) in newest.items():
        try:
            data = pickle.loads(path.read_bytes())  # written by the command's own ranks, in our private folder
            entries = [e for e in data.get("entries", []) if not e.get("is_p2p")]
        except Exception:  # noqa: BLE001 - a truncated or foreign file is no record
            continue
        dumps[pid] = Dump(pid, int(rank) if rank.isdigit() else None, entries)
    errors = [p.read_text(errors="replace").strip() for p in sorted(folder.glob("fr-*.err"))]
    return dumps, errors


def _op(entry: dict[str, Any]) -> str:
    return str(entry.get("profiling_name", "?")).split(":")[-1]


def _key(entry: dict[str, Any]) -> tuple[str, str]:
    return _op(entry), str(entry.get("input_sizes"))


def _group(name: str, entries: dict[int, dict[int, dict[str, Any]]]) -> str:
    for by_seq in entries.values():
        for entry in by_seq.values():
            desc = entry.get("process_group", ("", ""))[1]
            return f"group {name} ({desc})" if desc and desc != "undefined" else f"group {name}"
    return f"group {name}"


@dataclass
class Difference:
    group: str  # "group 0 (default_pg)"
    seq: int
    calls: dict[int, dict[str, Any] | None]  # rank -> its entry at seq, None: it never reached it
    window: dict[int, list[dict[str, Any]]]  # rank -> its entries around seq, in order (for the table)
    last: dict[int, int]  # rank -> its last sequence number in the group (0: none)


def first_difference(by_rank: dict[int, list[dict[str, Any]]]) -> Difference | None:
    """The earliest collective, in any group, at which the ranks' records differ: another operation or
    other sizes, or a rank that never reached it. Ranks are compared in a group when they recorded at
    least one collective in it; every rank is in the default group ('0'), recorded there or not."""
    groups: dict[str, dict[int, dict[int, dict[str, Any]]]] = {}
    for rank, entries in by_rank.items():
        for entry in entries:
            name = str(entry.get("process_group", ("?",))[0])
            groups.setdefault(name, {}).setdefault(rank, {})[int(entry.get("collective_seq_id", 0))] = entry
    if "0" in groups:
        for rank in by_rank:
            groups["0"].setdefault(rank, {})
    found: list[Difference] = []
    for name, seqs in groups.items():
        if len(seqs) < 2:
            continue
        recorded = [min(s) for s in seqs.values() if s]
        start = max(recorded)  # the ring buffer keeps the last entries: compare where every rank still has them
        if any(not s for s in seqs.values()):
            start = min(recorded)
        end = max(max(s) for s in seqs.values() if s)
        for seq in range(start, end + 1):
            calls = {rank: s.get(seq) for rank, s in sorted(seqs.items())}
            if len({_key(e) if e else None for e in calls.values()}) > 1:
                window = {
                    rank: [s[i] for i in range(max(start, seq - 2), seq + 3) if i in s]
                    for rank, s in sorted(seqs.items())
                }
                last = {rank: max(s, default=0) for rank, s in seqs.items()}
                found.append(Difference(_group(name, seqs), seq, calls, window, last))
                break
    if not found:
        return None
    return min(found, key=lambda d: min(e.get("time_created_ns") or 0 for e in d.calls.values() if e))


def _call(entry: dict[str, Any]) -> str:
    return f"{_op(entry)} of {entry.get('input_sizes')}"


def _sentence(diff: Difference) -> str:
    called = {rank: e for rank, e in diff.calls.items() if e is not None}
    missing = [rank for rank, e in diff.calls.items() if e is None]
    parts = []
    by_call: dict[str, list[int]] = {}
    for rank, entry in called.items():
        by_call.setdefault(_call(entry), []).append(rank)
    for call, ranks in by_call.items():
        parts.append(f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))} called {call}")
    if len(by_call) > 1:
        text = f"the ranks first differ at collective #{diff.seq} of {diff.group}: " + "; ".join(parts)
        if missing:
            text += f"; rank(s) {', '.join(map(str, missing))} never reached it"
        return text
    lasts = ", ".join(
        f"rank {r}'s last was #{diff.last[r]}" if diff.last[r] else f"rank {r} recorded none" for r in missing
    )
    who = f"rank {missing[0]}" if len(missing) == 1 else "ranks " + ", ".join(map(str, missing))
    return f"{who} never reached collective #{diff.seq} of {diff.group}, where {'; '.join(parts)} ({lasts})"


def _table(diff: Difference) -> list[str]:
    from helpers.flight_records import FR_FIELDS, side_by_side  # notebook 07's reading of the records

    results = {
        rank: {"records": [{k: e.get(k) for k in FR_FIELDS} for e in entries]} for rank, entries in diff.window.items()
    }
    return side_by_side(results)


def _by_rank(expected: dict[int, int | None], dumps: dict[int, Dump]) -> dict[int, list[dict[str, Any]]]:
    """Each rank's entries (a rank's first dump wins when two processes claim it)."""
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for pid, dump in dumps.items():
        rank = dump.rank if dump.rank is not None else expected.get(pid)
        if rank is not None and rank not in by_rank:
            by_rank[rank] = dump.entries
    return by_rank


def verdict(folder: Path, table: bool = True) -> list[str]:
    """The report's lines about the records: none when no process made a process group; otherwise one
    line (the first difference, agreement, or why there are no records), then the rows around the first
    difference."""
    expected = ready(folder)
    if not expected:
        return []
    dumps, errors = read(folder)
    by_rank = _by_rank(expected, dumps)
    silent = sorted({r for pid, r in expected.items() if pid not in dumps and r is not None} - set(by_rank))
    no_record = (
        f"; no record from rank(s) {', '.join(map(str, silent))} (ended before writing one, or did not answer in time)"
        if silent
        else ""
    )
    if not by_rank:
        why = (
            errors[0] if errors else "no rank wrote its records (each ended before it could, or none answered in time)"
        )
        return [f"flight recorder: unavailable: {why}"]
    if not any(by_rank.values()):
        size = os.environ.get("TORCH_FR_BUFFER_SIZE")
        off = " (TORCH_FR_BUFFER_SIZE=0 turns it off)" if size == "0" else ""
        return [f"flight recorder: no collective recorded{off}" + no_record]
    diff = first_difference(by_rank) if len(by_rank) > 1 else None
    if diff is None:
        if len(by_rank) == 1:
            rank, entries = next(iter(by_rank.items()))
            last = entries[-1] if entries else None
            tail = f": its last collective was #{last.get('collective_seq_id')}, {_call(last)}" if last else ""
            if len(expected) == 1:  # a job of one rank (or the only rank that got as far as a group)
                return [f"flight recorder: only rank {rank} made a process group, nothing to compare{tail}"]
            return [f"flight recorder: records from rank {rank} only{tail}" + no_record]
        counts = ", ".join(f"rank {r}: {len(e)}" for r, e in sorted(by_rank.items()))
        return [f"flight recorder: the ranks' records agree (collectives recorded: {counts})" + no_record]
    lines = [f"flight recorder: {_sentence(diff)}" + no_record]
    if table:
        try:
            lines += [f"  {row}" for row in _table(diff)]
        except Exception as exc:  # noqa: BLE001 - the sentence stands without the table
            lines.append(f"  (no table: {type(exc).__name__}: {exc})")
        lines.append(f"  how to read these records: {SECTION}")
    return lines


def report(folder: Path) -> list[str]:
    """`verdict`, never raising: a fault of ours costs one line, not the rest of the report."""
    try:
        return verdict(folder)
    except Exception as exc:  # noqa: BLE001
        return [f"flight recorder: not read (internal error: {type(exc).__name__}: {exc})"]
