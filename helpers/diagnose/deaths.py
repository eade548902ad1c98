"""Deaths: which process of the command died, how, and what that usually means.

From the exit status of the main process, the faulthandler reports of processes that died of a fatal
signal, how each reaped child ended (sitecustomize's notes), and what torch and multiprocessing write on
stderr when a worker or a rank dies. The causes the course teaches come first (a missing main guard, the
sharing strategy, pickling, /dev/shm, a rank that left early, the command's own interpreter); each names
the process that failed (a rank, a worker), and the main process only for its own error.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable

import psutil

from helpers import catalogue
from helpers.diagnose import failures as failures_
from helpers.diagnose.patterns import _BOOTSTRAP, _CHILD_TRACEBACK, SECTIONS, Facts, Finding, api_seen, full_shm
from helpers.errors import clean, error_line

_SIGNALS = {
    "SIGKILL": "killed from outside: usually the kernel's out-of-memory killer (look for \"Out of memory: Killed "
    "process\" in `dmesg` or `journalctl -k`), or someone's kill -9",
    "SIGSEGV": "a crash in native code, e.g. growing a shared tensor (resize_ on shared storage) or a library "
    "that does not survive fork",
    "SIGBUS": "shared memory that could not be backed, usually a full /dev/shm",
    "SIGABRT": "an abort in native code (a C++ exception nobody caught, a failed assertion)",
    "SIGTERM": "asked to stop (a launcher, a scheduler's time limit, or torch ending the other ranks)",
    "SIGINT": "interrupted (Ctrl-C)",
}
_FATAL = {"SIGKILL", "SIGSEGV", "SIGBUS", "SIGABRT"}  # a child ended by SIGTERM was usually ended by its parent
_SIGNAL_SECTION = {"SIGBUS": SECTIONS["shm"], "SIGSEGV": SECTIONS["grow"]}
_WORKER_DIED = re.compile(
    r"DataLoader worker \(pid\(s\)? ?([\d, ]+)\) (?:exited unexpectedly|is killed by signal: ([^.\n]+))"
)
_SPAWN_DIED = re.compile(r"process (\d+) terminated with (signal \w+|exit code \d+)")
_SPAWN_RAISED = re.compile(r"-- Process (\d+) terminated with the following error:")
_TORCHRUN_FAILED = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)\s*\(pid: (\d+)\)", re.DOTALL)
_CAUGHT = re.compile(r"Caught (\w+) in DataLoader worker process (\d+)")
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([\w.]+)'")
_OPEN_FILES = ("Too many open files", "received 0 items of ancdata")
_PICKLE = re.compile(
    r"Can't pickle local object '([^']+)'|Can't pickle <function ([^ >]+)|Can't get local object '([^']+)'"
    r"|PicklingError: Can't pickle ([^:\n]+)"
)
_PEER = re.compile(r"Connection (?:closed|reset) by peer")
_FILE_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:", re.MULTILINE)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _how(code: int) -> str:
    return f"{signal_name(-code)}" if code < 0 else f"exit code {code}"


def _library(path: str) -> bool:
    parts = path.split("/")
    return "site-packages" in parts or "dist-packages" in parts or any(re.fullmatch(r"python3\.\d+", p) for p in parts)


def _user_frame(text: str) -> str:
    """`name (file:line)` of the innermost frame of the user's own code in a traceback, or ''."""
    frames = [(f, ln, n) for f, ln, n in _FILE_LINE.findall(text) if not _library(f) and not f.startswith("<")]
    if not frames:
        return ""
    file, line, name = frames[-1]
    return f"{name} ({os.path.basename(file)}:{line})"


def _rank_error(text: str) -> tuple[int, str, str] | None:
    """(rank, its error line, its innermost frame of the user's code) of the first rank whose traceback
    torch.multiprocessing.spawn re-raised, or a torchrun rank's `[rankN]:` traceback."""
    raised = _SPAWN_RAISED.search(text)
    if raised:
        part = text[raised.end() :]
        return int(raised.group(1)), error_line(part, pick="last"), _user_frame(part)
    lines = [m for m in _RANK_PREFIX.finditer(text)]
    if lines:
        rank = int(lines[0].group(1))
        own = "\n".join(line.split(":", 1)[1] for line in text.splitlines() if line.startswith(f"[rank{rank}]:"))
        error = error_line(own)
        if error:
            return rank, error, _user_frame(own)
    return None


def _who(facts: Facts) -> str:
    return f"the main process (pid {facts.main_pid})"


def _fatal_evidence(facts: Facts, fatal: dict[int, str]) -> list[str]:
    evidence = []
    for pid, report in fatal.items():
        role = (
            facts.by_pid[pid].role if pid in facts.by_pid else ("main process" if pid == facts.main_pid else "a child")
        )
        first = report.splitlines()[0]
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', report)
        where = " <- ".join(f"{n} ({os.path.basename(f)}:{ln})" for f, ln, n in frames[:3])
        evidence.append(f"pid {pid} ({role}): {first}" + (f" in {where}" if where else ""))
    return evidence


# ---- causes the course teaches --------------------------------------------------------------------


def wrong_interpreter(code: int, facts: Facts) -> Finding | None:
    """The command's Python cannot import a module the script needs (a system `python` without torch)."""
    missing = _NO_MODULE.search(facts.stderr)
    if missing is None or not facts.command:
        return None
    module = missing.group(1)
    program = facts.command[0]
    found = shutil.which(program) if os.sep not in program else program
    ours = os.path.realpath(sys.executable)
    interpreter = os.path.realpath(found) if found else program
    evidence = [f"stderr: {clean(missing.group(0))}", f"the command runs {program!r}, which is {found or '?'}"]
    interpreter_name = interpreter if os.path.basename(program).startswith("python") else program
    if os.path.basename(program).startswith("python") and interpreter != ours:
        return Finding(
            f"the command's interpreter cannot import {module}: `{program}` is {found or program}, not the "
            f"course's interpreter ({sys.executable})",
            evidence,
            f"Run the script with the course's interpreter: {sys.executable} -m helpers.diagnose -- "
            f"{sys.executable} {' '.join(facts.command[1:])}".rstrip()
            + " (or activate the environment first, so that `python` is that one).",
            SECTIONS["kit"],
            3,
        )
    return Finding(
        f"{_who(facts)} exited with code {code}: {interpreter_name} cannot import {module}",
        evidence,
        f"Install {module.split('.')[0]} into the environment that runs the script, or fix the import's name; the "
        f"course's interpreter is {sys.executable}.",
        SECTIONS["kit"],
        3,
    )


def missing_guard_death(code: int, facts: Facts) -> Finding | None:
    count = facts.stderr.count(_BOOTSTRAP)
    if not count:
        return None
    api = api_seen(facts)
    worker = _WORKER_DIED.search(facts.stderr)
    evidence = [
        f'stderr: {count} time(s) "RuntimeError: An attempt has been made to start a new process before the '
        'current process has finished its bootstrapping phase" (from a child)'
    ]
    if worker:
        evidence.append(f"stderr: {clean(worker.group(0))}")
    return Finding(
        f"a missing main guard: a spawn child of the {api} imported the script, whose top level starts the {api} "
        "again before the child has finished bootstrapping; the child died of that RuntimeError"
        + (f', and the {api} stopped with "worker exited unexpectedly"' if worker else "")
        + f"; then {_who(facts)} exited with code {code}",
        evidence,
        'Put everything that starts processes under `if __name__ == "__main__":` and keep only definitions at the '
        "top level of the script (spawn is the default on macOS and Windows, forkserver on Linux from 3.14).",
        SECTIONS["guard"],
        3,
    )


def open_files(code: int, facts: Facts) -> Finding | None:
    lines = [line.strip() for line in facts.stderr.splitlines() if any(k in line for k in _OPEN_FILES)]
    if not lines:
        return None
    sharing = any(k in facts.stderr for k in ("ancdata", "sharing strategy", "reductions.py", "resource_sharer"))
    if not sharing:
        return Finding(
            f"too many open files: a process of the command reached its open-file limit; then {_who(facts)} "
            f"exited with code {code}",
            [f"stderr: {clean(lines[-1])[:200]}"],
            "Close what you open (with `with`), or raise the limit (`ulimit -n`); if tensors come from workers, "
            'see the sharing strategies (torch.multiprocessing.set_sharing_strategy("file_system")).',
            SECTIONS["strategy"],
            2,
        )
    return Finding(
        "too many open files: under the file_descriptor sharing strategy every shared tensor a worker sends "
        "keeps one file descriptor open while it lives, and the process reached its open-file limit; then "
        f"{_who(facts)} exited with code {code}",
        [f"stderr: {clean(lines[-1])[:200]}"],
        "Keep plain numbers instead of the tensors (.item(), .tolist(), or .clone() before storing), raise the limit "
        '(`ulimit -n`), or call torch.multiprocessing.set_sharing_strategy("file_system") (it leaks /dev/shm files '
        "if a process is killed).",
        SECTIONS["strategy"],
        3,
    )


def unpicklable(code: int, facts: Facts) -> Finding | None:
    matches = list(_PICKLE.finditer(facts.stderr))
    if not matches:
        return None
    match = matches[-1]
    name = next(g for g in match.groups() if g)
    api = api_seen(facts)
    if "<lambda>" in name:
        what = f"{name} is a lambda, which has no name to be found by"
    elif "<locals>" in name:
        what = f"{name} is defined inside another function, where a worker cannot look it up"
    else:
        what = f"{name} cannot be pickled by module and name"
    return Finding(
        f"a function that cannot be pickled: {what}, and the {api} sends what its workers run by pickle; then "
        f"{_who(facts)} exited with code {code}",
        [f"stderr: {clean(match.group(0))}"],
        "Define the function at module level (importable by name), or use functools.partial of a module-level "
        "function instead of a lambda or a closure.",
        SECTIONS["pickle"],
        3,
    )


def peer_left(code: int, facts: Facts) -> Finding | None:
    """gloo's "Connection closed by peer" on a rank whose peer had exited normally (code 0)."""
    if not _PEER.search(facts.stderr) or "gloo" not in facts.stderr:
        return None
    failed = _rank_error(facts.stderr)
    normal = sorted((e for e in facts.ended.values() if e.code == 0 and e.parent == facts.main_pid), key=lambda e: e.at)
    if failed is None or not normal:
        return None
    rank, error, frame = failed
    ddp = [n for f, _, n in _FILE_LINE.findall(facts.stderr) if f.endswith("nn/parallel/distributed.py")]
    if "forward" in ddp or "_pre_forward" in ddp:
        return Finding(
            f"rank {rank} ran the DDP-wrapped model's forward after another rank had exited normally (exit code 0): "
            "DDP's forward is a collective (it broadcasts buffers from rank 0 and checks the ranks are in step), so "
            f"a forward on one rank alone (evaluation under `if rank == 0:` through the wrapper) waits for ranks "
            "that have left; evaluate on model.module",
            [
                f"rank {rank}: {error}" + (f" in {frame}" if frame else ""),
                "its traceback passes through DistributedDataParallel." + " <- ".join(dict.fromkeys(ddp)),
                "ended normally before it: " + ", ".join(f"pid {e.pid} (exit code 0)" for e in normal),
            ],
            "Run evaluation that only some ranks do on the bare model, model.module (no collective), or run it on "
            "every rank.",
            SECTIONS["ranks"],
            3,
        )
    op = next(
        (n for f, _, n in reversed(_FILE_LINE.findall(facts.stderr)) if f.endswith("distributed_c10d.py")),
        "a collective",
    )
    return Finding(
        f'rank {rank} failed in {op}() with gloo\'s "Connection closed by peer" after another rank had exited '
        "normally (exit code 0): the ranks were out of step (uneven inputs: one ran out of batches and left while "
        f"rank {rank} still called a collective)",
        [
            f"rank {rank}: {error[:160]}" + (f" in {frame}" if frame else ""),
            "ended normally before it: " + ", ".join(f"pid {e.pid} (exit code 0)" for e in normal),
        ],
        "Give every rank the same number of steps (DistributedSampler pads; drop_last=True), or wrap the loop in "
        "torch.distributed.algorithms.Join (with DDP) so that a rank that runs out keeps answering the others.",
        SECTIONS["ranks"],
        3,
    )


def rank_raised(code: int, facts: Facts) -> Finding | None:
    failed = _rank_error(facts.stderr)
    if failed is None:
        return None
    rank, error, frame = failed
    then = (
        f"torch.multiprocessing.spawn ended the other rank(s) and {_who(facts)} re-raised it (exit code {code})"
        if _SPAWN_RAISED.search(facts.stderr)
        else f"the launcher ended the other rank(s) and exited with code {code}"
    )
    return Finding(
        f"rank {rank} raised {error or 'an error'}" + (f" in {frame}" if frame else "") + f"; {then}",
        [f"stderr: rank {rank}'s traceback: {error[:200]}"],
        "Read that rank's traceback above (innermost frame last); run the function alone with nprocs=1 (or one "
        "rank) to debug it.",
        SECTIONS["spawn"],
        3,
    )


def worker_killed(code: int, facts: Facts) -> Finding | None:
    """A child of the main process ended by a fatal signal (SIGKILL, SIGSEGV, SIGBUS), as its parent reaped it."""
    killed = sorted(
        (e for e in facts.ended.values() if e.code < 0 and signal_name(-e.code) in _FATAL),
        key=lambda e: e.at,
    )
    if not killed:
        return None
    first = killed[0]
    name = signal_name(-first.code)
    api = api_seen(facts)
    role = {
        "DataLoader": "DataLoader worker",
        "Pool": "pool worker",
        "ProcessPoolExecutor": "ProcessPoolExecutor worker",
    }.get(api, "child process")
    error = error_line(facts.stderr)
    return Finding(
        f"a {role} (pid {first.pid}) was killed by {name}: {_SIGNALS[name]}; then {_who(facts)} exited with code "
        f"{code}" + (f" ({error})" if error else ""),
        [f"pid {first.pid} ended with {name}, as its parent (pid {first.parent}) reaped it"]
        + ([f"stderr, its last line: {error}"] if error else []),
        "If it was the out-of-memory killer: fewer workers, smaller batches or prefetch_factor; a SIGBUS: more room "
        "in /dev/shm; a SIGSEGV: the faulthandler stack above, or run with num_workers=0.",
        _SIGNAL_SECTION.get(name, SECTIONS["dead"] if role != "DataLoader worker" else SECTIONS["worker"]),
        3,
    )


# ---- every failing process, read from stderr and named from the catalogue --------------------------


def _quote(failure: failures_.Failure) -> str:
    """`who: the whole message [in frame]`: never cut (torch often names the fix at the end)."""
    where = f"   [in {failure.frame}]" if failure.frame else ""
    known = f"   [catalogue: {failure.entry.id}]" if failure.entry else ""
    return f"{failure.who}: {failure.message}{where}{known}"


def _port_holder(message: str, facts: Facts) -> list[str]:
    """Who listens on the port an "address already in use" names: the command's own processes (seen before
    they were ended) and any other process of the machine psutil may see."""
    port = re.search(r"port: (\d+)|:(\d+)\b.*(?:EADDRINUSE|already in use)", message)
    if not port:
        return []
    number = int(port.group(1) or port.group(2))
    holders = dict(facts.listening.get(number, {}))
    try:
        for conn in psutil.net_connections("tcp"):
            if conn.laddr and conn.laddr.port == number and conn.status == psutil.CONN_LISTEN and conn.pid:
                with contextlib.suppress(psutil.Error):
                    holders.setdefault(conn.pid, " ".join(psutil.Process(conn.pid).cmdline()))
    except (OSError, psutil.Error):  # no permission to see other users' sockets: what the tree showed
        pass
    return [f"port {number} is held now by pid {pid}: {cmd[:160]}" for pid, cmd in sorted(holders.items())]


def from_failures(code: int, facts: Facts, hung: bool = False) -> Finding | None:
    """The first failing process on stderr, its whole message, and what the catalogue knows of it; when the
    catalogue knows nothing, say so and show the failure with the user's own frame (no generic fix)."""
    found = failures_.find(facts.stderr)
    first = failures_.first(found, facts.stderr)
    if first is None:
        return None
    evidence = [_quote(f) for f in found if not (f.who == "the main process" and f is not first and _only_reraises(f))]
    root = failures_.torchrun_root(facts.stderr)
    if root is not None:
        others = ", ".join(f"rank {r} ({_how(c)})" for r, c, _ in root.others)
        evidence.append(
            f"torchrun's summary: root cause (first observed failure) rank {root.rank}, {_how(root.code)}, "
            f"pid {root.pid}" + (f"; listed after it (ended by torchrun, or failed later): {others}" if others else "")
        )
    ended = "while the command still ran (it did not end by the deadline)" if hung else _then(first, facts, code)
    evidence += _other_ranks(facts, first)
    entry = first.entry
    if entry is not None and entry.id == "address-in-use":
        evidence += _port_holder(first.message, facts)
    relay = next((e for e in catalogue.match_all(facts.stderr) if e.id in _RELAYS), None)
    if entry is None and relay is not None and first.who != "the main process":
        return Finding(
            f"{first.who} raised {first.first_line()}"
            + (f" in {first.frame}" if first.frame else "")
            + f" (an error of the script: not one the course's catalogue knows); {relay.cause.split(': ')[0]}"
            + f"; {ended}",
            evidence,
            relay.fix,
            relay.where(),
            3 if first.frame else 2,
        )
    if entry is None:
        return Finding(
            f"{first.who} raised {first.first_line()}"
            + (f" in {first.frame}" if first.frame else "")
            + f"; {ended}; not a failure the course knows (its catalogue of errors has no entry for this message)",
            evidence,
            f"None from the course: the catalogue of errors does not know this message. Start from {first.who}'s "
            + (f"own frame, {first.frame}, " if first.frame else "traceback ")
            + "and its whole message above.",
            "the course's error index (site: Error index) lists the errors it knows",
            1,
        )
    consequence = entry.id in failures_._CONSEQUENCES
    return Finding(
        f"{first.who} raised {first.first_line()}"
        + (f" in {first.frame}" if first.frame else "")
        + f": {entry.cause.rstrip('.')}"
        + f"; {ended}",
        evidence,
        entry.fix,
        entry.where(),
        2 if consequence else 3,
    )


# how a launcher reports a child's error: known even when the error itself is not
_RELAYS = ("dataloader-caught", "spawn-process-raised", "pool-remote-traceback", "child-failed")


def _then(first: failures_.Failure, facts: Facts, code: int) -> str:
    """How the command ended after that failure, naming the main process only for its own error."""
    launched = (
        failures_.torchrun_root(facts.stderr) is not None
        or "torch.distributed.elastic" in facts.stderr
        or any(
            word in " ".join(facts.command)
            for word in ("torchrun", "torch.distributed.run", "torch.distributed.launch")
        )
    )
    if first.who.startswith("rank"):
        if _SPAWN_RAISED.search(facts.stderr) or _SPAWN_DIED.search(facts.stderr):
            return (
                "torch.multiprocessing.spawn ended the other rank(s) and the main process re-raised it "
                f"(exit code {code})"
            )
        if launched:
            return f"the launcher ended the other rank(s) and exited with code {code}"
        return f"then it exited with code {code} (the rank is the main process: no launcher)"
    if first.who == "the main process":
        return f"then it exited with code {code}"
    return f"then {_who(facts)} exited with code {code}"


def _children_by_start(facts: Facts) -> list[int]:
    """The main process's children (forkserver's too) in the order they started: spawn and its fork variant
    start rank 0 first, so their index is the rank."""
    parents = {facts.main_pid} | {p.pid for p in facts.procs if p.role == "forkserver"}
    pids = {pid for pid, seen in facts.seen.items() if seen.ppid in parents} | {
        e.pid for e in facts.ended.values() if e.parent in parents
    }
    return sorted(pids, key=lambda pid: (facts.seen[pid].first if pid in facts.seen else float("inf"), pid))


def _other_ranks(facts: Facts, first: failures_.Failure) -> list[str]:
    """How the other ranks of torch.multiprocessing.spawn ended, by start order: ended by the launcher
    (SIGTERM: they had not failed, they were busy elsewhere) or failed on their own (an exit code)."""
    if not first.who.startswith("rank ") or not (
        _SPAWN_RAISED.search(facts.stderr) or _SPAWN_DIED.search(facts.stderr)
    ):
        return []
    children = _children_by_start(facts)
    lines = []
    for rank, pid in enumerate(children):
        if f"rank {rank}" == first.who or pid not in facts.ended:
            continue
        code = facts.ended[pid].code
        if code == -signal.SIGTERM:
            lines.append(
                f"rank {rank} (pid {pid}, by start order) was still running and had not failed: spawn ended it "
                "with SIGTERM after the failure; it was not in the collective the failing rank waited in"
            )
        elif code != 0:
            lines.append(
                f"rank {rank} (pid {pid}, by start order) failed too, on its own ({_how(code)}); spawn re-raises "
                "only the first failure, so its message is not on stderr"
            )
    return lines


def _only_reraises(failure: failures_.Failure) -> bool:
    """The main process's traceback that only reports a child's error (spawn, torchrun, a DataLoader's
    "Caught ... in DataLoader worker")."""
    entry = failure.entry
    return entry is not None and (entry.id in failures_._CONSEQUENCES or entry.id == "dataloader-caught")


def children_failed(facts: Facts) -> Finding | None:
    """The command exited 0, but children of it failed: a traceback of a child on stderr, or a child that its
    parent reaped with an error exit code or a fatal signal. The result it printed may be wrong."""
    found = [f for f in failures_.find(facts.stderr) if f.who != "the main process"]
    bad = sorted(
        (e for e in facts.ended.values() if e.code > 0 or (e.code < 0 and signal_name(-e.code) in _FATAL)),
        key=lambda e: e.at,
    )
    if not found and not bad:
        return None
    evidence = [_quote(f) for f in found] + [
        f"pid {e.pid} ended with {_how(e.code)}, as its parent (pid {e.parent}) reaped it" for e in bad
    ]
    first = found[0] if found else None
    what = (
        f"{first.who} raised {first.first_line()}" + (f" in {first.frame}" if first.frame else "")
        if first
        else f"a child process (pid {bad[0].pid}) ended with {_how(bad[0].code)}"
    )
    entry = first.entry if first else None
    return Finding(
        f"{_who(facts)} exited with code 0, but {len(found) or len(bad)} of its child process(es) failed: {what}"
        + (f": {entry.cause.rstrip('.')}" if entry else "")
        + "; whatever the script printed after that may be wrong (a result the child never sent)",
        evidence,
        (entry.fix + " " if entry else "")
        + "Make the parent fail when a child fails: check each Process's exitcode after join() and raise.",
        entry.where() if entry else SECTIONS["dead"],
        3 if entry else 2,
    )


_TAUGHT: tuple[Callable[[int, Facts], Finding | None], ...] = (
    wrong_interpreter,
    missing_guard_death,
    open_files,
    unpicklable,
    peer_left,
)


def diagnose_death(code: int, facts: Facts, fatal: dict[int, str]) -> Finding:
    """Which process died, how, and what that usually means."""
    main = facts.by_pid.get(facts.main_pid)
    who = _who(facts)
    text = facts.stderr
    evidence = _fatal_evidence(facts, fatal)
    if code < 0:
        name = signal_name(-code)
        return Finding(
            f"{who} died of {name}: {_SIGNALS.get(name, 'a signal')}",
            evidence,
            "Find who sent the signal (the kernel log for the OOM killer) or where the crash is (the "
            "faulthandler stack above); reduce memory use (fewer workers, smaller batches).",
            _SIGNAL_SECTION.get(name, SECTIONS["kit"]),
            3,
        )
    for rule in _TAUGHT:
        finding = rule(code, facts)
        if finding is not None:
            finding.evidence = evidence + finding.evidence
            return finding
    shm = full_shm(facts)
    if shm is not None and shm.score == 3:
        shm.cause = f"{who} exited with code {code}: {shm.cause}"
        shm.evidence = evidence + shm.evidence
        return shm
    catalogued = from_failures(code, facts)
    if catalogued is not None and catalogued.score == 3 and not catalogued.cause.startswith("the main process"):
        catalogued.evidence = evidence + catalogued.evidence
        return catalogued  # a child's own error, known to the catalogue: better than its signal alone
    for finding in (worker_killed(code, facts), catalogued):
        if finding is not None:
            finding.evidence = evidence + finding.evidence
            return finding
    error = error_line(text)
    worker = _WORKER_DIED.search(text)
    spawned = _SPAWN_DIED.search(text)
    ranked = _TORCHRUN_FAILED.search(text)
    if worker:
        how = f"was killed by signal {worker.group(2)}" if worker.group(2) else "exited unexpectedly"
        sig = {"Killed": "SIGKILL", "Bus error": "SIGBUS", "Segmentation fault": "SIGSEGV"}.get(worker.group(2) or "")
        evidence.append(f"stderr: {clean(worker.group(0))}")
        meaning = _SIGNALS.get(sig, "it crashed or was killed; its own stderr, above, may say why")
        return Finding(
            f"a DataLoader worker (pid {worker.group(1).strip()}) {how}: {meaning}; then {who} exited with code {code}",
            evidence,
            "Run with num_workers=0 to see the error in the main process; if it was killed, use fewer "
            "workers or smaller batches (memory), or give /dev/shm more room.",
            _SIGNAL_SECTION.get(sig or "", SECTIONS["worker"]),
            3,
        )
    if spawned:
        evidence.append(f"stderr: {clean(spawned.group(0))}")
        how = spawned.group(2).replace("signal ", "")
        return Finding(
            f"rank {spawned.group(1)} of torch.multiprocessing.spawn terminated with {spawned.group(2)}: "
            f"{_SIGNALS.get(how, 'its error is above')}; the others were ended and {who} exited with code "
            f"{code}",
            evidence,
            "Read that rank's traceback above; run the function directly with nprocs=1.",
            SECTIONS["spawn"],
            3,
        )
    root = failures_.torchrun_root(text)
    if root is not None:
        ranked = True
        rank, exitcode, pid = str(root.rank), str(root.code), str(root.pid)
    elif ranked:
        rank, exitcode, pid = ranked.groups()
    if ranked:
        how = f"signal {signal_name(-int(exitcode))}" if int(exitcode) < 0 else f"exit code {exitcode}"
        meaning = _SIGNALS.get(signal_name(-int(exitcode)), "") if int(exitcode) < 0 else "its traceback is above"
        evidence.append(f"stderr (torchrun's summary): rank {rank}, pid {pid}, {how}")
        return Finding(
            f"rank {rank} (pid {pid}) of the torchrun job died with {how}: {meaning}; torchrun ended the "
            f"others and exited with code {code}",
            evidence,
            "Read that rank's traceback above (decorate main with @record for an error file); run one rank "
            "alone to debug.",
            SECTIONS["ranks"],
            3,
        )
    caught = _CAUGHT.search(text)
    if caught:
        original = text[caught.end() :]
        raised = error_line(original) or error
        frame = _user_frame(original)
        evidence += [f"stderr: {caught.group(0)}", f"stderr, the worker's error: {raised}"]
        return Finding(
            f"DataLoader worker {caught.group(2)} raised {raised}"
            + (f" in {frame}" if frame else "")
            + f"; the DataLoader re-raised it in {who}, which exited with code {code}",
            evidence,
            "Fix the bug in your dataset's __getitem__ (or collate_fn); rerun with num_workers=0 to get a "
            "plain traceback with the real frame on top.",
            SECTIONS["worker"],
            3,
        )
    tracebacks = len(_CHILD_TRACEBACK.findall(text))
    if tracebacks:
        evidence.append(f"stderr: {tracebacks} child process traceback(s)")
    if error:
        evidence.append(f"stderr: {error}")
    frame = _user_frame(text)
    return Finding(
        f"not a failure the course knows: {who} exited with code {code}"
        + (f": {error}" if error else " without an error message")
        + (f" in {frame}" if frame and error else ""),
        evidence or [f"{main.label() if main else who}: no traceback on stderr"],
        "None from the course: nothing on stderr matches the catalogue of errors. "
        + (f"Start from your own frame, {frame}." if frame else "Look at what the script printed last."),
        "the course's error index (site: Error index) lists the errors it knows",
        1,
    )
