"""`python -m helpers.diagnose [--timeout S] [--no-py-spy] -- COMMAND ...`: the command line.

Exit codes: the command's own when it ends in time (128 + N when signal N ended it, as a shell says);
124 when it hung past the deadline (as `timeout(1)`), 130 on Ctrl-C, 2 for bad usage.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from helpers.diagnose import collectives, deaths, patterns, stacks, tree
from helpers.diagnose.patterns import Facts, Finding

USAGE = "usage: python -m helpers.diagnose [--timeout S] [--no-py-spy] -- COMMAND ..."
DEFAULT_TIMEOUT = 60.0
HUNG, INTERRUPTED, USAGE_ERROR = 124, 130, 2
_SITE = Path(__file__).resolve().parent.parent / "diagnose_site"


class UsageError(Exception):
    """Bad arguments: one line on stderr, exit code 2."""


def parse(argv: list[str]) -> tuple[float, bool, list[str]]:
    """(timeout, use py-spy, command) from the arguments; UsageError for anything else."""
    timeout, spy = DEFAULT_TIMEOUT, True
    args = list(argv)
    while args and args[0].startswith("-") and args[0] != "--":
        option = args.pop(0)
        if option in ("-h", "--help"):
            raise SystemExit(print(__doc__.strip().replace("`", "")) or 0)
        if option == "--no-py-spy":
            spy = False
            continue
        name, _, value = option.partition("=")
        if name != "--timeout":
            raise UsageError(f"unknown option {option!r} ({USAGE})")
        if not value:
            if not args:
                raise UsageError("--timeout needs a number of seconds")
            value = args.pop(0)
        try:
            timeout = float(value)
        except ValueError:
            raise UsageError(f"--timeout must be a number of seconds, got {value!r}") from None
        if not (timeout > 0 and math.isfinite(timeout)):
            raise UsageError(f"--timeout must be a positive number of seconds, got {value!r}")
    if args and args[0] == "--":
        args.pop(0)
    if not args:
        raise UsageError(f"no command given ({USAGE})")
    program = args[0]
    found = shutil.which(program) if os.sep not in program else (program if os.access(program, os.X_OK) else None)
    if found is None or Path(found).is_dir():
        raise UsageError(f"command not found or not executable: {program!r}")
    return timeout, spy, args


def _say(text: str) -> None:
    """Our own lines, on stderr (the command's stdout stays its own)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _shm_free() -> float | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_bavail / st.f_blocks if st.f_blocks else None


def _child_env(folder: Path, private_tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_SITE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["HELPERS_DIAGNOSE_DIR"] = str(folder)
    env["HELPERS_DIAGNOSE_PID"] = str(os.getpid())
    env["TMPDIR"] = str(private_tmp)  # torchrun's and DataLoader's temporary files go here, removed at the end
    collectives.prepare(folder, env)  # the Flight Recorder on, and the FIFO that asks the ranks for it
    return env


def _stack_block(proc: stacks.Proc) -> list[str]:
    lines = [f"  {proc.label()}: {shlex.join(proc.cmdline)[:160]}"]
    if not proc.threads:
        lines.append(f"      ({proc.note or 'no stack'})")
    for thread in proc.threads:
        state = {True: "idle", False: "active", None: "?"}[thread.idle]
        lines.append(f"    thread {thread.name} ({state}), from {proc.source}:")
        lines += [f"      {frame.short()}" for frame in thread.frames[:40]]
    return lines


def _report(
    headline: str, procs: list[stacks.Proc], findings: list[Finding], spy_note: str, flight: list[str]
) -> list[str]:
    lines = ["", f"diagnose: {headline}", "", "processes:"]
    for proc in procs:
        lines.append(f"  pid {proc.pid:<7} {proc.role:<28} {proc.status:<9} {shlex.join(proc.cmdline)[:70]}")
    if spy_note:
        lines.append(f"stacks: {spy_note}")
    lines.append("")
    if findings:
        best = findings[0]
        lines += [f"most likely cause: {best.cause}", "evidence:"]
        lines += [f"  {item}" for item in best.evidence]
        lines += [f"fix: {best.fix}", f"read: {best.section}"]
        for other in findings[1:]:
            lines.append(f"also possible: {other.cause} (read: {other.section})")
    else:
        lines += [
            "most likely cause: unknown: the stacks match none of the hangs the course teaches.",
            "Read the stacks below from the innermost frame: what does each process wait for?",
            f"read: {patterns.SECTIONS['kit']}, and the table of section 11",
        ]
    lines += flight
    lines += ["", "stacks (innermost frame first):"]
    for proc in procs:
        lines += _stack_block(proc)
    return lines


def _take_stacks(run: tree.Tree, folder: Path, use_spy: bool) -> tuple[list[stacks.Proc], str]:
    """Every process's role and stacks, before anything is killed."""
    procs = stacks.describe([p for p in run.processes() if p.pid not in run.helpers])
    stacks.sample_cpu(procs)
    stacks.read_fork_notes(procs, folder)
    spy = stacks.py_spy_path() if use_spy else None
    note = ""
    if spy is None:
        note = "py-spy not used (--no-py-spy)" if not use_spy else "py-spy is not installed (pip install py-spy)"
        note += "; stacks from the faulthandler files armed at start"
        for proc in procs:
            proc.note = "py-spy not used"
    else:
        stacks.take_with_py_spy(procs, spy, run.helpers.add)
        failed = [p for p in procs if p.note.startswith("py-spy could not attach")]
        if failed:
            note = (
                f"py-spy could not attach to {len(failed)} process(es) ({failed[0].note.split(': ', 1)[1]}); "
                "their stacks come from the faulthandler files armed at start"
            )
    stacks.take_with_faulthandler([p for p in procs if not p.threads], folder)
    stacks.assign_roles(procs, run.pid)
    return procs, note


def _wait(run_: tree.Tree, deadline: float, stop: threading.Event, watch: collectives.Watch) -> int | None:
    """`tree.wait`, looking between its looks whether a rank has ended (then the others dump their
    records before their launcher ends them)."""
    while True:
        code = tree.wait(run_, min(deadline, time.monotonic() + 0.2), stop)
        if code is not None or stop.is_set() or time.monotonic() >= deadline:
            return code
        try:
            watch.look()
        except Exception:  # noqa: BLE001 - the records are extra evidence, the run is the user's
            watch.fired = True


def _exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


def run(timeout: float, use_spy: bool, command: list[str]) -> int:
    """Run the command; diagnose it if it hangs, dies or is interrupted; end its whole tree."""
    stop = threading.Event()
    interrupted = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        interrupted.set()
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    tree.become_subreaper()
    shm_before = tree.shm_names()
    with tempfile.TemporaryDirectory(prefix="diagnose-") as tmp:
        folder, private_tmp = Path(tmp, "stacks"), Path(tmp, "tmp")
        folder.mkdir()
        private_tmp.mkdir()
        try:
            return _supervise(command, timeout, use_spy, folder, private_tmp, shm_before, stop, interrupted)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _supervise(command, timeout, use_spy, folder, private_tmp, shm_before, stop, interrupted) -> int:
    try:
        run_ = tree.start(command, _child_env(folder, private_tmp))
    except OSError as exc:
        _say(f"diagnose: error: cannot run {command[0]!r}: {exc.strerror or exc}")
        return USAGE_ERROR
    code = _wait(run_, time.monotonic() + timeout, stop, collectives.Watch(folder))
    if code is None and not interrupted.is_set():
        code = run_.proc.poll()  # it may have ended just at the deadline
    shown = shlex.join(command)
    if code is not None:
        procs = stacks.describe([p for p in run_.processes()])
        listening = tree.listening(run_)  # before the rest of the tree is ended: who holds which port
        left = tree.settle(run_, shm_before)
        stacks.assign_roles(procs, run_.pid)
        facts = Facts(procs, run_.pid, run_.stderr_text(), run_.seen, _shm_free(), stacks.ended(folder), list(command))
        facts.listening = listening
        try:
            finding = (
                deaths.diagnose_death(code, facts, stacks.fatal_reports(folder))
                if code != 0
                else deaths.children_failed(facts)
            )
        except Exception as exc:  # a bug of ours must not hide the command's own exit code
            finding = None
            _say(f"\ndiagnose: internal error while reading the failure ({type(exc).__name__}: {exc})")
        if finding is not None:
            flight = collectives.report(folder)
            how = f"died of {deaths.signal_name(-code)}" if code < 0 else f"exited with code {code}"
            _say(
                "\n".join(
                    [
                        "",
                        f"diagnose: `{shown}` {how} after {time.monotonic() - run_.started:.1f} s",
                        f"what happened: {finding.cause}",
                        "evidence:",
                        *[f"  {e}" for e in finding.evidence],
                        f"fix: {finding.fix}",
                        f"read: {finding.section}",
                        *flight,
                    ]
                )
            )
        if left:
            _say(
                f"diagnose: `{shown}` ended but left {len(left)} process(es) running; killed: "
                + ", ".join(f"pid {s.pid} ({shlex.join(s.cmdline)[:60]})" for s in left)
            )
        return _exit_code(code)
    elapsed = time.monotonic() - run_.started
    try:
        collectives.collect(folder)  # first: each rank's records, while every rank still runs
        procs, spy_note = _take_stacks(run_, folder, use_spy)
        facts = Facts(procs, run_.pid, run_.stderr_text(), run_.seen, _shm_free(), stacks.ended(folder), list(command))
        findings = patterns.diagnose_hang(facts)
        failed = deaths.from_failures(0, facts, hung=True)
        if failed is not None and failed.score >= 2:
            findings = sorted(findings + [failed], key=lambda f: -f.score) if findings else [failed]
        why = "interrupted (Ctrl-C)" if interrupted.is_set() else f"still running after {elapsed:.1f} s (--timeout)"
        flight = collectives.report(folder)
        _say("\n".join(_report(f"`{shown}` {why}: {len(procs)} process(es)", procs, findings, spy_note, flight)))
    except Exception as exc:  # a bug of ours must not leave the command running
        _say(f"\ndiagnose: internal error while reading the stacks ({type(exc).__name__}: {exc}); ending the command")
    killed = tree.end(run_, shm_before)
    left = tree.still_running(run_)
    _say(
        f"\ndiagnose: killed {killed} process(es)"
        + (f"; {len(left)} could not be killed" if left else "; nothing left running")
    )
    return INTERRUPTED if interrupted.is_set() else HUNG


def main(argv: list[str] | None = None) -> int:
    try:
        timeout, use_spy, command = parse(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        _say(f"diagnose: error: {exc}")
        return USAGE_ERROR
    return run(timeout, use_spy, command)
