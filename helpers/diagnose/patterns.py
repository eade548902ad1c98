"""The hangs the course teaches, as rules over the stacks, stderr and the tree's history.

Each rule returns a `Finding` (cause, the evidence that matched, a fix of one or two sentences, and the
notebook section that explains it) or None. The strongest finding wins; when none matches, the hang is
reported as unknown with its stacks, never forced into a pattern.
"""

from __future__ import annotations

import linecache
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from helpers.diagnose.stacks import Ended, Frame, Proc, Thread
from helpers.diagnose.tree import Seen
from helpers.errors import clean, error_line

NB06 = "06_deadlocks_and_pitfalls"
SECTIONS = {
    "fork": f'{NB06}, section 1 "Fork after threads"',
    "notebook": f'{NB06}, section 2 "A notebook function under spawn"',
    "guard": f'{NB06}, section 3 "A script without `if __name__ == "__main__":`"',
    "queues": f'{NB06}, section 4 "Queues: joining before draining, and a producer that died"',
    "groups": f'{NB06}, section 6 "Process groups: a port in use, a group left behind"',
    "shm": f'{NB06}, section 7 "Exhausted shared memory (`/dev/shm`)"',
    "kit": f'{NB06}, section 9 "The debugging kit, on a real hang"',
    "ranks": '05_ddp, section 9 "When ranks disagree"',
    "store": '05_ddp, section 1 "A process group on one machine"',
    "worker": '01_dataloader_workers, section 8 "When things go wrong in a worker"',
    "spawn": '04_pool_vs_process, section 5 "`torch.multiprocessing.spawn` and errors"',
    "dead": '04_pool_vs_process, section 6 "When a worker dies"',
    "grow": '02_shared_tensors, section 3 "`share_memory_()`, `.grad`, and tensors that must not grow"',
    "strategy": '02_shared_tensors, section 4 "Sharing strategies and "Too many open files""',
    "pickle": '04_pool_vs_process, section 3 "Per-task overhead: `chunksize`" (what cannot be pickled), and '
    '00_orientation, section 4 "Worker functions must be importable"',
}


@dataclass
class Finding:
    cause: str
    evidence: list[str]
    fix: str
    section: str
    score: int  # 3: the frames prove it; 2: strong circumstantial evidence; 1: a likely reading


@dataclass
class Facts:
    """Everything a rule may look at."""

    procs: list[Proc]
    main_pid: int
    stderr: str
    seen: dict[int, Seen]
    shm_free: float | None = None  # fraction of /dev/shm free, None where there is none
    ended: dict[int, Ended] = field(default_factory=dict)  # children reaped during the run, and how they ended
    command: list[str] = field(default_factory=list)  # the command as typed
    listening: dict[int, dict[int, str]] = field(default_factory=dict)  # port -> {pid: command} of the tree
    by_pid: dict[int, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_pid = {p.pid: p for p in self.procs}

    def children(self, pid: int) -> list[Proc]:
        """The processes `pid` started: its own children, and those its forkserver forked for it (under
        forkserver, Linux's default from Python 3.14, a `Process` is a child of the server, not of the
        process that started it)."""
        direct = [p for p in self.procs if p.ppid == pid]
        servers = {p.pid for p in direct if p.role == "forkserver"}
        return [p for p in direct if p.pid not in servers] + [p for p in self.procs if p.ppid in servers]


def _frames(proc: Proc, *names: str, file: str = "") -> list[Frame]:
    """Frames of any thread whose function (last part of the qualified name) is one of `names`."""
    return [f for f in proc.all_frames() if f.name.split(".")[-1] in names and file in f.file]


def _stack_line(proc: Proc, frames: list[Frame] | None = None, depth: int = 4) -> str:
    """`pid N (role): inner <- outer <- ...`, the innermost `depth` Python frames (or native ones
    when given)."""
    if frames is None:
        thread = proc.main_thread()
        frames = thread.python_frames() if thread else []
    text = " <- ".join(f.short() for f in frames[:depth])
    return f"{proc.label()}: {text or 'no stack'}"


def _source(frame: Frame) -> str:
    return linecache.getline(frame.file, frame.line).strip() if frame.file else ""


def _from_frame(proc: Proc, frame: Frame) -> list[Frame]:
    """The Python frames of the thread holding `frame`, from `frame` outward."""
    for thread in proc.threads:
        if frame in thread.frames:
            python = thread.python_frames()
            return python[python.index(frame) :] if frame in python else python
    return [frame]


def _is_library(path: str) -> bool:
    """A file of Python itself or of an installed package (not the user's own code)."""
    parts = Path(path).parts
    return "site-packages" in parts or "dist-packages" in parts or any(re.fullmatch(r"python3\.\d+", p) for p in parts)


def user_frame(proc: Proc, thread: Thread | None = None) -> Frame | None:
    """The innermost frame of the user's own code in the main thread (or `thread`): the line to look at
    when the inner frames are C or a library's."""
    thread = thread or proc.main_thread()
    if thread is None:
        return None
    return next((f for f in thread.python_frames() if f.file and not _is_library(f.file)), None)


def _user_line(proc: Proc, thread: Thread | None = None) -> str:
    """`[your code: name (file:line): source]`, or '' where the stack has no frame of the user's."""
    frame = user_frame(proc, thread)
    if frame is None:
        return ""
    source = _source(frame)
    return f"   [your code: {frame.short()}" + (f": {source}" if source else "") + "]"


def _evidence_line(proc: Proc, frames: list[Frame] | None = None) -> str:
    """`_stack_line` plus the user's own innermost frame when the line does not start with it (inner frames
    in C or in a library)."""
    line = _stack_line(proc, frames)
    frame = user_frame(proc)
    if frame is not None and line.split(": ", 1)[-1].startswith(frame.short()):
        return line
    return line + _user_line(proc)


def _innermost(proc: Proc) -> list[Frame]:
    """The two innermost frames of the main thread whatever they are (C too), then its Python frames."""
    thread = proc.main_thread()
    if thread is None:
        return []
    native = [f for f in thread.frames[:2] if f.native]
    return native + thread.python_frames()[: 4 - len(native)]


# ---- hangs ----------------------------------------------------------------------------------------


_POOLS = (
    # (name, how its native frames are recognised, the fix in a forked child)
    (
        "tokenizers' Rust thread pool (rayon)",
        ("rayon_core", "rayon::", "tokenizers.abi3"),
        "leave TOKENIZERS_PARALLELISM unset or set it to false (tokenizers then turns its pool off in a forked "
        "child), do no batch encode in the parent before the fork, or start the workers with spawn",
    ),
    (
        "OpenBLAS's thread pool",
        ("openblas", "blas_thread_server", "exec_blas"),
        "limit the pool to one thread in the child (threadpoolctl.threadpool_limits(1), or OPENBLAS_NUM_THREADS=1 "
        "before numpy is imported), or start the workers with spawn",
    ),
    (
        "MKL's thread pool",
        ("libmkl", "mkl_serv", "libiomp"),
        "limit the pool to one thread in the child (threadpoolctl.threadpool_limits(1), or MKL_NUM_THREADS=1), or "
        "start the workers with spawn",
    ),
)


def _pool_frames(thread: Thread, marks: tuple[str, ...]) -> list[Frame]:
    return [f for f in thread.frames if f.native and any(m in f.file or m in f.name for m in marks)]


def fork_after_openmp(facts: Facts) -> Finding | None:
    for proc in facts.procs:
        thread = proc.main_thread()
        if thread is None:
            continue
        gomp = [f for f in thread.frames if f.native and ("libgomp" in f.file or f.name.lower().startswith("gomp"))]
        if gomp and thread.idle is not False:
            python = thread.python_frames()
            evidence = [
                _evidence_line(proc, gomp[:2] + python[:2]),
                f"{proc.label()} is {'a forked child' if proc.forked else 'started by exec'} "
                f"with {proc.threads_count} thread(s), idle in GNU OpenMP's thread barrier",
            ]
            return Finding(
                "fork after OpenMP: a forked child waits in libgomp for OpenMP threads that fork did not copy",
                evidence,
                "Call torch.set_num_threads(1) in the forked child before its first torch op (DataLoader workers "
                'do), or start it with spawn or forkserver (mp.get_context("spawn")).',
                SECTIONS["fork"],
                3 if proc.forked else 2,
            )
        python = thread.python_frames()
        if proc.forked and proc.libgomp and proc.threads_count == 1 and python and not proc.source.startswith("py-spy"):
            top = python[0]
            if "torch" in _source(top) or "/torch/" in top.file:
                return Finding(
                    "probably fork after OpenMP: a forked child with torch loaded, one thread, stuck in a torch call",
                    [_stack_line(proc), "no native frames to confirm it (py-spy could not attach)"],
                    "Call torch.set_num_threads(1) in the forked child before its first torch op, or start it "
                    "with spawn or forkserver.",
                    SECTIONS["fork"],
                    1,
                )
    return None


def fork_after_thread_pool(facts: Facts) -> Finding | None:
    """A forked child idle in another library's native thread pool (not GNU OpenMP's): the pool's
    bookkeeping was copied by fork, its threads were not."""
    for proc in facts.procs:
        thread = proc.main_thread()
        if thread is None or not proc.forked or thread.idle is False:
            continue
        for name, marks, fix in _POOLS:
            frames = _pool_frames(thread, marks)
            if not frames:
                continue
            env = ""
            if name.startswith("tokenizers"):
                value = _environ_value(proc.pid, "TOKENIZERS_PARALLELISM")
                env = f"; TOKENIZERS_PARALLELISM={value!r} in its environment" if value is not None else ""
            return Finding(
                f"fork after a thread pool: a forked child waits in {name} for threads that fork did not copy",
                [
                    _evidence_line(proc, frames[:2] + thread.python_frames()[:2]),
                    f"{proc.label()} is a forked child with {proc.threads_count} thread(s), idle in {name}{env}",
                ],
                fix[0].upper() + fix[1:] + ".",
                SECTIONS["fork"],
                3,
            )
    return None


def _environ_value(pid: int, name: str) -> str | None:
    """One variable of a process's starting environment (None where unset or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        key, _, value = item.decode(errors="replace").partition("=")
        if key == name:
            return value
    return None


_LOCK_NATIVE = ("PyThread_acquire_lock", "acquire_timed", "lock_PyThread_acquire_lock")


_LOCK_EXPR = re.compile(r"\bwith\s+([\w.]+)\s*:|([\w.]+)\.acquire\(")


def _lock_wait(proc: Proc) -> tuple[Frame, str, bool] | None:
    """(the Python frame, its source line, native proof) where the main thread waits for a threading
    lock, or None. A multiprocessing lock is left out: another process can release it."""
    thread = proc.main_thread()
    if thread is None:
        return None
    python = thread.python_frames()
    if not python or "multiprocessing/synchronize.py" in python[0].file:
        return None
    native = any(f.native and f.name.startswith(_LOCK_NATIVE) for f in thread.frames)
    line = _source(python[0])
    if native or _LOCK_EXPR.search(line) and re.search(r"lock|Lock", line):
        return python[0], line, native
    return None


def _enclosing_with(frame: Frame) -> str:
    """The source of the `with X:` / `X.acquire()` lines that enclose the frame's current line in its own
    function (read backwards to its `def`), joined: what this frame holds while it calls further in."""
    if not frame.file or frame.line <= 0:
        return ""
    current = linecache.getline(frame.file, frame.line)
    indent = len(current) - len(current.lstrip())
    found = []
    for number in range(frame.line - 1, max(0, frame.line - 200), -1):
        text = linecache.getline(frame.file, number)
        if not text.strip():
            continue
        depth = len(text) - len(text.lstrip())
        if depth < indent:
            if _LOCK_EXPR.search(text):
                found.append(text.strip())
            if text.lstrip().startswith(("def ", "async def ")):
                break
            indent = depth
    return "\n".join(found)


def _taken_before(proc: Proc, frame: Frame, line: str) -> tuple[Frame, str, bool] | None:
    """An outer frame of the same thread inside a `with` of the same lock expression (`with self.lock:`
    taken twice), its line, and whether py-spy's locals prove it is the same object."""
    match = _LOCK_EXPR.search(line)
    if not match:
        return None
    expr = match.group(1) or match.group(2)
    thread = proc.main_thread()
    python = thread.python_frames() if thread else []
    for outer in python[python.index(frame) + 1 :] if frame in python else []:
        for held in _enclosing_with(outer).splitlines():
            again = _LOCK_EXPR.search(held)
            if again and (again.group(1) or again.group(2)) == expr:
                head = expr.split(".")[0]
                inner_value, outer_value = frame.locals.get(head), outer.locals.get(head)
                if inner_value and outer_value and inner_value != outer_value:
                    continue  # the same name for two objects (py-spy's locals): not the same lock
                return outer, held, bool(inner_value) and inner_value == outer_value
    return None


def lock_taken_twice(facts: Facts) -> Finding | None:
    """A thread that waits for a lock it already holds itself: a threading.Lock is not re-entrant."""
    for proc in facts.procs:
        found = _lock_wait(proc)
        if found is None:
            continue
        frame, line, native = found
        before = _taken_before(proc, frame, line)
        if before is None:
            continue
        outer, held, same = before
        return Finding(
            f"a lock taken twice{'' if same else ' (probably)'}: {proc.label()} waits for a lock that its own "
            f"thread already holds, taken in {outer.short()}; a threading.Lock is not re-entrant, so nobody will "
            "release it",
            [
                _stack_line(proc) + f"   [{line}]",
                f"{outer.short()}: {_source(outer)}, inside `{held}`   [the same lock, taken further out in the "
                "same thread" + (", the same object (py-spy's locals)]" if same else "]"),
            ],
            "Do not take the lock again in a function called while it is held (split out an unlocked helper), or "
            "use threading.RLock, which the same thread may take again.",
            SECTIONS["fork"],
            3 if same or native else 2,
        )
    return None


def lock_held_at_fork(facts: Facts) -> Finding | None:
    for proc in facts.procs:
        if not proc.forked or proc.threads_count != 1:
            continue
        found = _lock_wait(proc)
        if found is None or proc.threads_at_fork == 1:
            continue  # with one thread at the fork, no other thread can have held the lock
        frame, line, native = found
        if _taken_before(proc, frame, line) is not None:
            continue  # lock_taken_twice
        threads = (
            f"its parent had {proc.threads_at_fork} threads when it forked"
            if proc.threads_at_fork
            else "how many threads its parent had at the fork is not known"
        )
        return Finding(
            "a lock held at fork: a forked child waits for a threading lock that another thread of its parent "
            "held when it forked; that thread was not copied, so nobody can release it",
            [
                _stack_line(proc) + (f"   [{line}]" if line else ""),
                f"{proc.label()} has 1 thread: no thread of its own can release the lock; {threads}",
            ],
            "Start processes before starting threads, or use spawn or forkserver for anything that has "
            "threads; never take a lock in a forked child that threads of the parent use.",
            SECTIONS["fork"],
            (3 if native else 2) if proc.threads_at_fork else (2 if native else 1),
        )
    return None


def lock_never_released(facts: Facts) -> Finding | None:
    """A process waiting for a threading lock when neither rule above explains who holds it."""
    for proc in facts.procs:
        found = _lock_wait(proc)
        if found is None or not found[2]:
            continue
        frame, line, _ = found
        if proc.threads_count != 1:
            continue  # another thread of its own may still release it
        why = (
            "it was forked from a single thread, so no thread of its parent held the lock at the fork"
            if proc.forked and proc.threads_at_fork == 1
            else "it has no other thread that could release it"
        )
        return Finding(
            f"a lock that nobody will release: {proc.label()} waits for a threading lock, and {why}",
            [_evidence_line(proc, _innermost(proc)) + (f"   [{line}]" if line else "")],
            "Find where that lock was taken and not released (an early return or an exception without `with`, "
            "or a lock taken twice: a Lock is not re-entrant, an RLock is).",
            SECTIONS["fork"],
            2,
        )
    return None


def join_before_drain(facts: Facts) -> Finding | None:
    for proc in facts.procs:
        joins = _frames(proc, "join", file="multiprocessing/process.py")
        if not joins:
            continue
        for child in facts.children(proc.pid):
            feeding = [f for f in _frames(child, "_feed", file="multiprocessing/queues.py")]
            sending = _frames(child, "_send", "_send_bytes", "send_bytes", file="multiprocessing/connection.py")
            if feeding and sending:
                feeder = next(t for t in child.threads if any(f in t.frames for f in feeding))
                return Finding(
                    "join before drain: a process joins a child whose queue item is still in the pipe; the child "
                    "cannot exit until someone reads it",
                    [
                        _evidence_line(proc, _from_frame(proc, joins[0])),
                        _stack_line(child, feeder.python_frames()) + "   [the queue's feeder thread, writing]",
                        _stack_line(child) + "   [main thread, exiting: waits for the feeder]",
                    ],
                    "Get the items from the queue first, then join the producer (with a timeout); a process does "
                    "not exit before its queue's feeder thread has written everything into the pipe.",
                    SECTIONS["queues"],
                    3,
                )
    return None


_GET = ("get", "recv", "recv_bytes", "_recv_bytes")


def _blocking_get(proc: Proc) -> Frame | None:
    """A `Queue.get()` / `SimpleQueue.get()` / `Connection.recv()` in the main thread, without a timeout."""
    thread = proc.main_thread()
    if thread is None:
        return None
    for frame in thread.python_frames():
        if frame.name.split(".")[-1] in _GET and "multiprocessing/" in frame.file:
            outer = thread.python_frames()
            outer = outer[outer.index(frame) + 1 :]
            if outer and "multiprocessing/" in outer[0].file and outer[0].name.split(".")[-1] in _GET:
                continue
            if frame.name.endswith("Queue.get") and "timeout" in _source(frame) and "poll" in _source(frame):
                return None
            return frame
    return None


_CHILD_TRACEBACK = re.compile(r"^Process [\w:-]+:\nTraceback \(most recent call last\):", re.MULTILINE)


def dead_producer(facts: Facts) -> Finding | None:
    for proc in facts.procs:
        if proc.role.startswith(("DataLoader", "pool", "resource", "forkserver")):
            continue
        frame = _blocking_get(proc)
        if frame is None:
            continue
        gone = [s for s in facts.seen.values() if s.ppid == proc.pid and s.gone is not None]
        zombies = [c for c in facts.children(proc.pid) if c.status == "zombie"]
        tracebacks = _CHILD_TRACEBACK.findall(facts.stderr)
        busy = [
            p
            for p in facts.procs
            if p.pid != proc.pid and p.role.startswith(("child", "rank")) and p.status != "zombie"
        ]
        evidence = [_evidence_line(proc, _from_frame(proc, frame))]
        if zombies or gone:
            evidence.append(
                f"child process(es) of pid {proc.pid} that ended during the run: "
                + ", ".join(str(s.pid) for s in (gone or [facts.seen.get(z.pid) or z for z in zombies]))
            )
        if tracebacks:
            error = error_line(facts.stderr[facts.stderr.find("Traceback") :]) or "a traceback"
            evidence.append(f"stderr: a child process's traceback ({len(tracebacks)}): {error}")
        if (zombies or gone or tracebacks) and not busy:
            score = 3 if tracebacks else 2
        elif not busy:
            evidence.append("no other process of the tree could still send it anything")
            score = 1
        else:
            continue
        return Finding(
            "a dead (or missing) producer: a process waits in a get() with no timeout for an item that no "
            "process will send",
            evidence,
            "Give every get a timeout and, when it expires, check producer.is_alive(); have the producer always "
            "send a sentinel (its result, or the error it caught).",
            SECTIONS["queues"],
            score,
        )
    return None


_BOOTSTRAP = "bootstrapping phase"  # the message is wrapped over lines; this part is on one
_NOTEBOOK = re.compile(r"Can't get attribute '[^']+' on <module '__main__'")


def _churn(facts: Facts) -> list[Seen]:
    return [
        s
        for s in facts.seen.values()
        if s.gone is not None
        and s.pid != facts.main_pid
        and "multiprocessing.resource_tracker" not in " ".join(s.cmdline)
    ]


def missing_main_guard(facts: Facts) -> Finding | None:
    count = facts.stderr.count(_BOOTSTRAP)
    notebook = _NOTEBOOK.findall(facts.stderr)
    if not count and not notebook:
        return None
    churn = _churn(facts)
    main = facts.by_pid.get(facts.main_pid)
    evidence = [
        f"stderr: {count or len(notebook)} times "
        + (
            '"RuntimeError: An attempt has been made to start a new process before the current process has '
            'finished its bootstrapping phase"'
            if count
            else f'"AttributeError: {notebook[0]}>"'
        ),
        f"{len(churn)} worker process(es) started and died during the run, each replaced by a new one"
        if churn
        else "no worker lived long enough to be seen",
    ]
    if main is not None:
        evidence.insert(0, _stack_line(main))
    if count:
        api = api_seen(facts)
        then = {
            "Pool": "the Pool replaces them forever",
            "ProcessPoolExecutor": "the ProcessPoolExecutor breaks",
            "DataLoader": 'the DataLoader stops with "worker exited unexpectedly"',
        }.get(api, f"the {api} dies")
        return Finding(
            f"a missing main guard: each spawn child imports the script and runs its top level again, which starts "
            f"processes again ({api}); the children die with the bootstrapping error and {then}",
            evidence,
            'Put everything that starts processes under `if __name__ == "__main__":` and keep only definitions '
            "at the top level of the script.",
            SECTIONS["guard"],
            3 if churn else 2,
        )
    return Finding(
        "a function defined in __main__ (a notebook or an unguarded script) sent to spawn workers: each one dies "
        "looking it up, and the pool waits forever",
        evidence,
        "Move the function into a module the workers can import, and give every get a timeout.",
        SECTIONS["notebook"],
        3 if churn else 2,
    )


def api_seen(facts: Facts) -> str:
    """Which API started the processes: DataLoader, Pool, ProcessPoolExecutor, or a Process."""
    text = facts.stderr
    frames = [f for p in facts.procs for f in p.all_frames()]
    if "DataLoader worker" in text or "torch/utils/data" in text or any("torch/utils/data/" in f.file for f in frames):
        return "DataLoader"
    if "concurrent/futures/process.py" in text or any("concurrent/futures/process.py" in f.file for f in frames):
        return "ProcessPoolExecutor"
    if "multiprocessing/pool.py" in text or any("multiprocessing/pool.py" in f.file for f in frames):
        return "Pool"
    return "Process"


_POOL_WAITS = ("map", "starmap", "get", "wait", "next", "__next__")


def _how_ended(code: int) -> str:
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def killed_pool_worker(facts: Facts) -> Finding | None:
    """The main process waits on a Pool, and one of its workers ended during the run while the pool lives:
    a task died with its worker, and its result never comes. The evidence: the parent reaped it (its exit
    code, from sitecustomize's note), diagnose saw it vanish, or a live worker started well after its
    siblings (a replacement)."""
    main = facts.by_pid.get(facts.main_pid)
    if main is None or facts.stderr.count(_BOOTSTRAP) or _NOTEBOOK.search(facts.stderr):
        return None  # workers that die at start-up: missing_main_guard explains those
    waiting = _frames(main, *_POOL_WAITS, file="multiprocessing/pool.py")
    workers = [p for p in facts.children(facts.main_pid) if p.role == "pool worker"]
    parents = {facts.main_pid} | {p.pid for p in facts.procs if p.role == "forkserver"}
    if not waiting or not workers:
        return None
    alive = {p.pid for p in facts.procs}
    reaped = [e for e in facts.ended.values() if e.parent in parents and e.pid not in alive]
    vanished = [s for s in _churn(facts) if s.ppid in parents and s.pid not in facts.ended]
    firsts = sorted(facts.seen[w.pid].first for w in workers if w.pid in facts.seen)
    earliest = (
        [w.pid for w in workers if w.pid in facts.seen and facts.seen[w.pid].first == firsts[0]] if firsts else []
    )
    late = [
        w
        for w in workers
        if w.pid in facts.seen and facts.seen[w.pid].first - firsts[0] > 0.5 and all(w.pid > e for e in earliest)
    ]
    if not reaped and not vanished and not late:
        return None
    evidence = [_evidence_line(main, _from_frame(main, waiting[0]))]
    if reaped:
        evidence.append(
            "worker(s) that ended during the run, as their parent reaped them: "
            + ", ".join(f"pid {e.pid} ({_how_ended(e.code)})" for e in reaped)
        )
    if vanished:
        evidence.append(
            f"{len(vanished)} worker process(es) vanished during the run (pid "
            + ", ".join(str(s.pid) for s in vanished)
            + ")"
        )
    if late and not reaped and not vanished:
        evidence.append(
            "pool worker(s) started after their siblings, i.e. replacements for a worker that ended: "
            + ", ".join(w.label() for w in late)
        )
    evidence.append(f"{len(workers)} pool worker(s) alive now: " + ", ".join(p.label() for p in workers))
    codes = [e.code for e in reaped]
    how = f" ({', '.join(sorted({_how_ended(c) for c in codes}))})" if codes else ""
    return Finding(
        f"a pool worker died mid-task{how}: its task is lost, so the Pool's wait never ends (the Pool starts a "
        "replacement but does not run the task again); ProcessPoolExecutor fails fast instead",
        evidence,
        "Find out why it died: an exit code is sys.exit/os._exit in the task (SystemExit is not caught by the "
        'Pool), SIGKILL usually the out-of-memory killer (as root, `dmesg` shows "Out of memory: Killed process"). '
        "Bound the wait with map_async(...).get(timeout=...), or use concurrent.futures.ProcessPoolExecutor, which "
        "raises BrokenProcessPool instead of waiting.",
        SECTIONS["dead"],
        3 if reaped else 2 if vanished else 1,
    )


_COLLECTIVES = (
    "barrier",
    "monitored_barrier",
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "gather",
    "scatter",
    "send",
    "recv",
    "all_gather_object",
    "broadcast_object_list",
    "wait",
)


def _world(facts: Facts) -> int | None:
    sizes = {p.env.get("WORLD_SIZE") for p in facts.procs if p.env.get("WORLD_SIZE", "").isdigit()}
    return int(sizes.pop()) if len(sizes) == 1 else None


# DDP's forward and backward are collectives too: forward broadcasts buffers, backward all-reduces gradients
_DDP_COLLECTIVE = ("forward", "_pre_forward", "_sync_buffers", "_sync_module_buffers")


def waiting_in_collective(facts: Facts) -> Finding | None:
    waiting = {}
    for proc in facts.procs:
        frames = _frames(proc, *_COLLECTIVES, file="torch/distributed/distributed_c10d.py")
        ddp = _frames(proc, *_DDP_COLLECTIVE, file="torch/nn/parallel/distributed.py")
        if ddp:
            outer = ddp[-1]
            waiting[proc.pid] = Frame(
                "DistributedDataParallel.forward", outer.file, outer.line, outer.native, outer.locals
            )
        elif frames:
            waiting[proc.pid] = frames[-1]  # the outermost: the collective the user called
    if not waiting:
        return None
    evidence = []
    for pid, frame in waiting.items():
        proc = facts.by_pid[pid]
        evidence.append(_evidence_line(proc, _from_frame(proc, frame)))
    ranked = [p for p in facts.procs if p.rank is not None and "worker" not in p.role and "agent" not in p.role]
    in_collective = sorted({facts.by_pid[pid].rank for pid in waiting if facts.by_pid[pid].rank is not None})
    elsewhere = [p for p in ranked if p.pid not in waiting and p.rank not in in_collective]
    for proc in elsewhere:
        evidence.append(_stack_line(proc) + "   [not in a collective]")
    world = _world(facts)
    missing = []
    if world is not None and in_collective:
        present = {p.rank for p in ranked}
        missing = [r for r in range(world) if r not in present]
        if missing:
            evidence.append(f"rank(s) {', '.join(map(str, missing))} of {world}: no process (exited or never started)")
    not_there = sorted(set(missing) | {p.rank for p in elsewhere if p.rank is not None})
    ops: dict[str, list[int | None]] = {}
    for pid, frame in waiting.items():
        ops.setdefault(frame.name.split(".")[-1], []).append(facts.by_pid[pid].rank)
    fix = (
        "Every rank must call the same collectives in the same order: look for an early return, uneven batches or "
        "a condition on the rank; Join handles uneven inputs, TORCH_DISTRIBUTED_DEBUG=DETAIL reports mismatches."
    )
    if "forward" in ops:
        fix = (
            "DDP's forward is a collective (it broadcasts buffers and keeps the ranks in step): every rank must run it,"
            " so evaluation that only some ranks do goes through the bare model, model.module. " + fix
        )
    if len(ops) > 1:
        each = ", ".join(
            f"{_ranks(ranks)} in {op}()" for op, ranks in sorted(ops.items(), key=lambda item: _first_rank(item[1]))
        )
        return Finding(
            f"ranks out of step: {each}; each waits for the others to call the same collective"
            + (f", and rank(s) {', '.join(map(str, not_there))} call none" if not_there else ""),
            evidence,
            fix,
            SECTIONS["ranks"],
            3,
        )
    names = ", ".join(str(r) for r in in_collective) or "unknown ranks"
    op = next(iter(ops))
    return Finding(
        f"waiting in a collective: rank(s) {names} wait in {op}() for rank(s) "
        f"{', '.join(map(str, not_there)) or 'unknown'}, which never call it",
        evidence,
        fix,
        SECTIONS["ranks"],
        3 if (elsewhere or missing) else 2,
    )


def _ranks(ranks: list[int | None]) -> str:
    known = sorted(r for r in ranks if r is not None)
    if not known:
        return "a process of unknown rank"
    return f"rank {known[0]}" if len(known) == 1 else "ranks " + ", ".join(map(str, known))


def _first_rank(ranks: list[int | None]) -> int:
    return min((r for r in ranks if r is not None), default=1 << 30)


_RENDEZVOUS = (
    "init_process_group",
    "rendezvous",
    "_create_c10d_store",
    "_env_rendezvous_handler",
    "_tcp_rendezvous_handler",
    "_store_based_barrier",
    "next_rendezvous",
    "TCPStore",
)


def waiting_for_store(facts: Facts) -> Finding | None:
    for proc in facts.procs:
        frames = [
            f
            for f in proc.all_frames()
            if f.name.split(".")[-1] in _RENDEZVOUS and ("torch/distributed" in f.file or not f.file)
        ]
        if not frames:
            continue
        where = proc.env.get("MASTER_ADDR", "?") + ":" + proc.env.get("MASTER_PORT", "?")
        evidence = [_evidence_line(proc, _from_frame(proc, frames[0]))]
        if "MASTER_PORT" in proc.env:
            evidence.append(f"{proc.label()} meets the others at {where}, world size {proc.env.get('WORLD_SIZE', '?')}")
        missing = _missing_ranks(facts)
        if missing:
            ranks, world = missing
            evidence.append(
                f"world size {world}; rank(s) waiting: {', '.join(map(str, sorted(ranks)))} (init_process_group's "
                "arguments, read by py-spy); no process of the tree is any other rank"
            )
        return Finding(
            "waiting for a store or rendezvous: a rank waits for the others to reach the same store, and "
            "not all of them do"
            + (
                f": rank(s) {', '.join(str(r) for r in range(missing[1]) if r not in missing[0])} of {missing[1]} "
                "never arrived"
                if missing
                else ""
            ),
            evidence,
            "Start every rank with the same store address and port (MASTER_ADDR/MASTER_PORT, tcp:// or file://) and "
            "a world_size equal to the ranks you start; let the OS pick a free port for the store.",
            SECTIONS["groups"],
            2,
        )
    return None


def _missing_ranks(facts: Facts) -> tuple[set[int], int] | None:
    """(ranks seen waiting, world size) from init_process_group's locals, when the world is larger."""
    ranks: set[int] = set()
    worlds: set[int] = set()
    for proc in facts.procs:
        for frame in _frames(proc, "init_process_group", file="torch/distributed"):
            rank, world = frame.locals.get("rank", ""), frame.locals.get("world_size", "")
            if rank.lstrip("-").isdigit() and world.isdigit():
                ranks.add(int(rank))
                worlds.add(int(world))
        if proc.rank is not None:
            ranks.add(proc.rank)
    if len(worlds) != 1:
        return None
    world = worlds.pop()
    return (ranks, world) if len(ranks) < world else None


def dataloader_worker_stuck(facts: Facts) -> Finding | None:
    main = [p for p in facts.procs if _frames(p, "_try_get_data", file="torch/utils/data/dataloader.py")]
    workers = [p for p in facts.procs if p.role.startswith("DataLoader worker")]
    busy = [w for w in workers if _frames(w, "fetch", "__getitem__", "__getitems__")]
    if not main or not busy:
        return None
    return Finding(
        "a DataLoader waiting for a worker stuck inside your dataset (a stalled read, a lock, a hang of its own)",
        [_evidence_line(main[0])] + [_evidence_line(w, _innermost(w)) for w in busy[:3]],
        "Pass DataLoader(timeout=...) to turn the stall into an error, and run with num_workers=0 to debug the "
        "dataset in the main process.",
        SECTIONS["kit"],
        2,
    )


def full_shm(facts: Facts) -> Finding | None:
    lines = [
        line
        for line in facts.stderr.splitlines()
        if "No space left on device" in line
        or "unable to allocate shared memory" in line
        or "unable to write to file </torch_" in line
        or "Bus error" in line
        or "killed by signal: Bus error" in line
    ]
    full = facts.shm_free is not None and facts.shm_free < 0.02
    if not lines and not full:
        return None
    evidence = [f"stderr: {clean(lines[-1].strip())}"] if lines else []
    if facts.shm_free is not None:
        evidence.append(f"/dev/shm is {100 * (1 - facts.shm_free):.0f} % full now")
    return Finding(
        "a full /dev/shm: DataLoader workers (and shared tensors) could not allocate shared memory",
        evidence,
        "Use smaller batches, fewer workers or a smaller prefetch_factor, or give the container more shared "
        "memory (docker --shm-size=2g or --ipc=host); the file_system sharing strategy is not a fix.",
        SECTIONS["shm"],
        3 if lines else 1,
    )


def slow_not_hung(facts: Facts) -> Finding | None:
    """The main process keeps a core busy and no rule found a wait: probably slow, not hung."""
    main = facts.by_pid.get(facts.main_pid)
    if main is None:
        return None
    thread = main.main_thread()
    busy = [p for p in facts.procs if p.cpu is not None and p.cpu >= 0.5]
    active = thread is not None and thread.idle is False
    # on a loaded machine a running process gets only part of a core: py-spy's "active" (its main thread is
    # on the CPU or waiting for one, not asleep) with some CPU used, now or over its life, says running too
    shares = [x for x in (main.cpu, main.cpu_life) if x is not None]
    if main not in busy and not (active and (not shares or max(shares) >= 0.1)):
        return None
    evidence = [
        f"{p.label()} used {100 * p.cpu:.0f} % of a core while diagnose watched it"
        + (f" ({100 * p.cpu_life:.0f} % over its life)" if p.cpu_life is not None else "")
        for p in sorted({q.pid: q for q in [*busy, main]}.values(), key=lambda q: q.pid)
        if p.cpu is not None
    ]
    if hasattr(os, "getloadavg"):
        evidence.append(f"the machine's load average is {os.getloadavg()[0]:.1f} on {os.cpu_count()} core(s)")
    if thread is not None:
        state = {True: "idle", False: "running", None: "in an unknown state"}[thread.idle]
        evidence.append(f"{_evidence_line(main)}   [main thread {state}]")
    return Finding(
        "probably slow, not hung: the main process is running on the CPU and waits for nothing the course teaches",
        evidence,
        "Give it a longer --timeout (or watch it with `py-spy top --pid`); if it only looks stuck, time a few "
        "iterations and see where the time goes.",
        SECTIONS["kit"],
        1,
    )


HANG_RULES = (
    fork_after_openmp,
    fork_after_thread_pool,
    lock_taken_twice,
    lock_held_at_fork,
    join_before_drain,
    missing_main_guard,
    killed_pool_worker,
    waiting_in_collective,
    waiting_for_store,
    full_shm,
    dataloader_worker_stuck,
    dead_producer,
    lock_never_released,
    slow_not_hung,
)


def diagnose_hang(facts: Facts) -> list[Finding]:
    """Every finding, strongest first (the first rule listed wins a tie)."""
    found = [f for rule in HANG_RULES if (f := rule(facts)) is not None]
    if any(f is not None and not f.cause.startswith("probably slow") for f in found):
        found = [f for f in found if not f.cause.startswith("probably slow")]  # something does wait
    return sorted(found, key=lambda f: -f.score)
