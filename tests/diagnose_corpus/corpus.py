"""The corpus of real failing scripts: read each case's header, run it under `python -m helpers.diagnose`,
and grade the verdict against the thread's recorded cause.

Each case is one script whose docstring holds `Key: value` lines (a value may go on over indented lines):
Source (the thread), Cause (its true cause), Changed (what this machine needed), Expect, Timeout, and
optionally Reproduces (`no: why`) and Wrap (`shm`: run inside a private 16 MB /dev/shm).

Expect is `nothing` (the script ends well and diagnose says nothing), `not hung` (diagnose must say the
script is slow, not hung), or phrases joined by `&&`: the first must be in the cause line (the cause is
named there, not only in advice), the others anywhere in the verdict (cause, evidence, fix, read, and the
Flight Recorder's line); a phrase starting with `!` must not appear in the cause line. Timeout is seconds, or
`torch F`: F times this machine's `import torch` time as busy as the machine is when the case starts, plus
2 s (see tests/machine_speed.py).

`python tests/diagnose_corpus/corpus.py [--root DIR]` runs every case and prints the score table of the
README (with `--root`, under the helpers of another checkout, e.g. `git archive` of an older commit).
"""

from __future__ import annotations

import ast
import functools
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
if str(HERE.parent) not in sys.path:  # run as a script, or loaded by path from the tests
    sys.path.insert(0, str(HERE.parent))

import machine_speed  # noqa: E402 - needs the path above

_KEY = re.compile(r"^([A-Z][a-z]+): ?(.*)$")
_VERDICT_START = ("most likely cause:", "what happened:")
_GENERIC = ("most likely cause: unknown", "exited with code")


@dataclass
class Case:
    name: str
    path: Path
    fields: dict[str, str]

    @property
    def expect(self) -> str:
        return self.fields["Expect"]

    @property
    def reproduces(self) -> bool:
        return not self.fields.get("Reproduces", "yes").startswith("no")

    def timeout(self) -> float:
        value = self.fields.get("Timeout", "10")
        if value.startswith("torch"):
            return machine_speed.torch_deadline(float(value.split()[1]))
        return float(value)


@dataclass
class Outcome:
    case: Case
    returncode: int
    stderr: str
    seconds: float

    @property
    def report(self) -> str:
        at = self.stderr.find("\ndiagnose: ")
        return self.stderr[at:] if at >= 0 else ""

    @property
    def cause(self) -> str:
        return next((line for line in self.report.splitlines() if line.startswith(_VERDICT_START)), "")

    @property
    def verdict(self) -> str:
        """The cause line through the `read:` line, and the Flight Recorder's line (not the `also possible`
        lines, nor the stacks)."""
        lines = self.report.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith(_VERDICT_START)), None)
        if start is None:
            return ""
        block = []
        for line in lines[start:]:
            block.append(line)
            if line.startswith("read:"):
                break
        # the Flight Recorder's line (the first collective where the ranks differ) is part of the verdict
        block += [line for line in lines if line.startswith("flight recorder:")]
        return "\n".join(block)


def cases() -> list[Case]:
    found = []
    for path in sorted(HERE.glob("*.py")):
        if path.name == Path(__file__).name:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        fields: dict[str, str] = {}
        key = None
        for line in doc.splitlines():
            match = _KEY.match(line)
            if match:
                key = match.group(1)
                fields[key] = match.group(2).strip()
            elif key and line.startswith("    "):
                fields[key] += " " + line.strip()
        if "Expect" not in fields or "Source" not in fields:
            raise ValueError(f"{path.name}: the header needs Source and Expect lines")
        found.append(Case(path.stem, path, fields))
    return found


def command(case: Case, timeout: float) -> list[str]:
    inner = [sys.executable, "-m", "helpers.diagnose", "--timeout", str(timeout), "--"]
    inner += [sys.executable, str(case.path)]
    if case.fields.get("Wrap") == "shm":
        shell = 'mount -t tmpfs -o size=16m tmpfs /dev/shm && exec "$@"'
        return ["unshare", "-Urm", "sh", "-c", shell, "sh", *inner]
    return inner


@functools.lru_cache(maxsize=1)
def private_shm() -> str:
    """'' where a user and mount namespace with its own /dev/shm can be made here, else why not."""
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux) for a private /dev/shm"
    probe = ["unshare", "-Urm", "sh", "-c", "mount -t tmpfs -o size=16m tmpfs /dev/shm"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no private /dev/shm here ({exc})"
    return "" if done.returncode == 0 else f"no private /dev/shm here: {done.stderr.strip()[:100]}"


def can_run(case: Case) -> str:
    """Why the case cannot run here ('' when it can)."""
    if not case.reproduces:
        return case.fields["Reproduces"]
    if case.fields.get("Wrap") == "shm":
        return private_shm()
    return ""


def run(case: Case, root: Path = ROOT) -> Outcome:
    """Run one case under the `helpers.diagnose` found in `root` (another checkout scores an older diagnose)."""
    deadline = case.timeout()  # read once: it follows the machine's load
    started = time.monotonic()
    done = subprocess.run(
        command(case, deadline),
        capture_output=True,
        text=True,
        timeout=deadline + 90,
        cwd=root,
        stdin=subprocess.DEVNULL,
    )
    return Outcome(case, done.returncode, done.stderr, time.monotonic() - started)


def problems(outcome: Outcome) -> list[str]:
    """What is wrong with the verdict (empty: right)."""
    expect = outcome.case.expect
    if expect == "nothing":
        return [] if outcome.returncode == 0 and not outcome.report else [f"expected nothing, got: {outcome.cause}"]
    if expect == "not hung":
        return [] if "probably slow, not hung" in outcome.cause else [f"expected 'not hung', got: {outcome.cause}"]
    wrong = []
    for i, phrase in enumerate(p.strip() for p in expect.split("&&")):
        if phrase.startswith("!"):
            if phrase[1:].strip() in outcome.cause:
                wrong.append(f"the cause must not say {phrase[1:].strip()!r}")
        elif i == 0 and phrase not in outcome.cause:
            wrong.append(f"the cause line does not say {phrase!r}")
        elif phrase not in outcome.verdict:
            wrong.append(f"missing {phrase!r}")
    return wrong


def grade(outcome: Outcome) -> str:
    """right / partly / wrong / nothing useful (the README's table)."""
    if not problems(outcome):
        return "right"
    cause = outcome.cause
    if outcome.case.expect in ("nothing", "not hung"):
        return "nothing useful" if not cause or cause.startswith(_GENERIC[0]) else "wrong"
    phrases = [p.strip() for p in outcome.case.expect.split("&&")]
    if any(p.startswith("!") and p[1:].strip() in cause for p in phrases):
        return "wrong"
    if any(p in outcome.verdict for p in phrases if not p.startswith("!")):
        return "partly"
    if not cause or any(g in cause for g in _GENERIC):
        return "nothing useful"
    return "wrong"


def run_all(selected: list[Case], jobs: int = 2, root: Path = ROOT) -> list[Outcome]:
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(lambda case: run(case, root), selected))


def main(argv: list[str]) -> None:
    """The score table; `--root DIR` runs the helpers.diagnose of another checkout (`git archive` of an
    older commit) on the same cases."""
    root = Path(argv[argv.index("--root") + 1]).resolve() if "--root" in argv else ROOT
    runnable = [c for c in cases() if not can_run(c)]
    started = time.monotonic()
    outcomes = run_all(runnable, root=root)
    print("| case | expected | grade | seconds | verdict |")
    print("|---|---|---|---|---|")
    for outcome in outcomes:
        cause = outcome.cause.split(":", 1)[-1].strip()[:110] or "(nothing)"
        print(f"| {outcome.case.name} | {outcome.case.expect} | {grade(outcome)} | {outcome.seconds:.1f} | {cause} |")
    for case in cases():
        if can_run(case):
            print(f"| {case.name} | {case.expect} | not run: {can_run(case)} | | |")
    counts = {g: sum(grade(o) == g for o in outcomes) for g in ("right", "partly", "wrong", "nothing useful")}
    print(f"\n{counts}; {len(outcomes)} cases in {time.monotonic() - started:.1f} s of wall time")


if __name__ == "__main__":
    main(sys.argv[1:])
