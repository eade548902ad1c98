"""Deaths: which process of the command died, how, and what that usually means.

From the exit status of the main process, the faulthandler reports of processes that died of a fatal
signal, and what torch and multiprocessing write on stderr when a worker or a rank dies.
"""

from __future__ import annotations

import os
import re
import signal

from helpers.diagnose.patterns import _CHILD_TRACEBACK, SECTIONS, Facts, Finding, full_shm
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
_SIGNAL_SECTION = {"SIGBUS": SECTIONS["shm"], "SIGSEGV": SECTIONS["grow"]}
_WORKER_DIED = re.compile(
    r"DataLoader worker \(pid\(s\)? ?([\d, ]+)\) (?:exited unexpectedly|is killed by signal: ([^.\n]+))"
)
_SPAWN_DIED = re.compile(r"process (\d+) terminated with (signal \w+|exit code \d+)")
_TORCHRUN_FAILED = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)\s*\(pid: (\d+)\)", re.DOTALL)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def diagnose_death(code: int, facts: Facts, fatal: dict[int, str]) -> Finding:
    """Which process died, how, and what that usually means."""
    main = facts.by_pid.get(facts.main_pid)
    who = f"the main process (pid {facts.main_pid})"
    text = facts.stderr
    evidence: list[str] = []
    for pid, report in fatal.items():
        role = (
            facts.by_pid[pid].role if pid in facts.by_pid else ("main process" if pid == facts.main_pid else "a child")
        )
        first = report.splitlines()[0]
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', report)
        where = " <- ".join(f"{n} ({os.path.basename(f)}:{ln})" for f, ln, n in frames[:3])
        evidence.append(f"pid {pid} ({role}): {first}" + (f" in {where}" if where else ""))
    error = error_line(text)
    worker = _WORKER_DIED.search(text)
    spawned = _SPAWN_DIED.search(text)
    ranked = _TORCHRUN_FAILED.search(text)
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
    if ranked:
        rank, exitcode, pid = ranked.groups()
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
    shm = full_shm(facts)
    if shm is not None and shm.score == 3:
        shm.cause = f"{who} exited with code {code}: {shm.cause}"
        return shm
    caught = re.search(r"Caught \w+ in DataLoader worker process \d+", text)
    if caught:
        evidence += [f"stderr: {caught.group(0)}", f"stderr, its last line: {error}"]
        return Finding(
            f"a DataLoader worker raised, and {who} exited with code {code}: the worker's own traceback "
            "is in the message above",
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
    return Finding(
        f"{who} exited with code {code}" + (f": {error}" if error else " without an error message"),
        evidence or [f"{main.label() if main else who}: no traceback on stderr"],
        "Read the traceback above, innermost frame last; in a worker, rerun with num_workers=0 or nprocs=1 "
        "to get it in the main process.",
        SECTIONS["kit"],
        1,
    )
