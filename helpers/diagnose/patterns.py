"""The hangs the course teaches, as rules over the stacks, stderr and the tree's history.

Each rule returns a `Finding` (cause, the evidence that matched, a fix of one or two sentences, and the
notebook section that explains it) or None. The strongest finding wins; when none matches, the hang is
reported as unknown with its stacks, never forced into a pattern.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass, field

from helpers.diagnose.stacks import Frame, Proc
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


# ---- hangs ----------------------------------------------------------------------------------------


def fork_after_openmp(facts: Facts) -> Finding | None:
    for proc in facts.procs:
        thread = proc.main_thread()
        if thread is None:
            continue
        gomp = [f for f in thread.frames if f.native and ("libgomp" in f.file or f.name.lower().startswith("gomp"))]
        if gomp and thread.idle is not False:
            python = thread.python_frames()
            evidence = [
                _stack_line(proc, gomp[:2] + python[:2]),
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


_LOCK_NATIVE = ("PyThread_acquire_lock", "acquire_timed", "lock_PyThread_acquire_lock")


def lock_held_at_fork(facts: Facts) -> Finding | None:
    for proc in facts.procs:
        thread = proc.main_thread()
        if thread is None or not proc.forked or proc.threads_count != 1:
            continue
        python = thread.python_frames()
        if not python or "multiprocessing/synchronize.py" in python[0].file:
            continue  # a multiprocessing lock can be released by another process
        native = any(f.native and f.name.startswith(_LOCK_NATIVE) for f in thread.frames)
        line = _source(python[0])
        textual = bool(re.search(r"\bwith\b.*(lock|Lock)|\.acquire\(", line))
        if native or textual:
            return Finding(
                "a lock held at fork: a forked child waits for a threading lock that another thread of its parent "
                "held when it forked; that thread was not copied, so nobody can release it",
                [
                    _stack_line(proc) + (f"   [{line}]" if line else ""),
                    f"{proc.label()} has 1 thread: no thread of its own can release the lock",
                ],
                "Start processes before starting threads, or use spawn or forkserver for anything that has "
                "threads; never take a lock in a forked child that threads of the parent use.",
                SECTIONS["fork"],
                3 if native else 2,
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
                        _stack_line(proc, _from_frame(proc, joins[0])),
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
        evidence = [_stack_line(proc, _from_frame(proc, frame))]
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
        return Finding(
            "a missing main guard: each spawn child imports the script and runs its top level again, which starts "
            "processes again; the children die with the bootstrapping error and a Pool replaces them forever",
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


_POOL_WAITS = ("map", "starmap", "get", "wait", "next", "__next__")


def killed_pool_worker(facts: Facts) -> Finding | None:
    """The main process waits on a Pool, a worker of that pool vanished during the run, and live pool
    workers (the replacements) idle: a task died with its worker, and its result never comes."""
    main = facts.by_pid.get(facts.main_pid)
    if main is None or facts.stderr.count(_BOOTSTRAP) or _NOTEBOOK.search(facts.stderr):
        return None  # workers that die at start-up: missing_main_guard explains those
    waiting = _frames(main, *_POOL_WAITS, file="multiprocessing/pool.py")
    workers = [p for p in facts.children(facts.main_pid) if p.role == "pool worker"]
    parents = {facts.main_pid} | {p.pid for p in facts.procs if p.role == "forkserver"}
    vanished = [s for s in _churn(facts) if s.ppid in parents]
    if not waiting or not workers or not vanished:
        return None
    return Finding(
        "a pool worker died in the middle of a task (killed, e.g. by the out-of-memory killer's SIGKILL, or "
        "crashed): the Pool started a new worker, but the lost task's result never arrives, so the wait never ends",
        [
            _stack_line(main, _from_frame(main, waiting[0])),
            f"{len(vanished)} worker process(es) vanished during the run (pid "
            + ", ".join(str(s.pid) for s in vanished)
            + f"); {len(workers)} pool worker(s) alive now: "
            + ", ".join(p.label() for p in workers),
        ],
        'Find out why it died (an exit code of -9 is SIGKILL; as root, `dmesg` shows "Out of memory: Killed '
        'process" for the OOM killer). Bound the wait with map_async(...).get(timeout=...), or use '
        "concurrent.futures.ProcessPoolExecutor, which raises BrokenProcessPool instead of waiting.",
        SECTIONS["dead"],
        2,
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


def waiting_in_collective(facts: Facts) -> Finding | None:
    waiting = {}
    for proc in facts.procs:
        frames = _frames(proc, *_COLLECTIVES, file="torch/distributed/distributed_c10d.py")
        if frames:
            waiting[proc.pid] = frames[-1]  # the outermost: the collective the user called
    if not waiting:
        return None
    evidence = []
    for pid, frame in waiting.items():
        proc = facts.by_pid[pid]
        evidence.append(_stack_line(proc, _from_frame(proc, frame)))
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
    names = ", ".join(str(r) for r in in_collective) or "unknown ranks"
    not_there = ", ".join(str(r) for r in sorted(set(missing) | {p.rank for p in elsewhere})) or "unknown"
    op = next(iter(waiting.values())).name.split(".")[-1]
    return Finding(
        f"waiting in a collective: rank(s) {names} wait in {op}() for rank(s) {not_there}, which never call it",
        evidence,
        "Every rank must call the same collectives in the same order: look for an early return, uneven batches or "
        "a condition on the rank; Join handles uneven inputs, TORCH_DISTRIBUTED_DEBUG=DETAIL reports mismatches.",
        SECTIONS["ranks"],
        3 if (elsewhere or missing) else 2,
    )


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
        evidence = [_stack_line(proc, _from_frame(proc, frames[0]))]
        if "MASTER_PORT" in proc.env:
            evidence.append(f"{proc.label()} meets the others at {where}, world size {proc.env.get('WORLD_SIZE', '?')}")
        return Finding(
            "waiting for a store or rendezvous: a rank waits for the others to reach the same store, and "
            "not all of them do",
            evidence,
            "Start every rank with the same store address and port (MASTER_ADDR/MASTER_PORT, tcp:// or file://) and "
            "a world_size equal to the ranks you start; let the OS pick a free port for the store.",
            SECTIONS["groups"],
            2,
        )
    return None


def dataloader_worker_stuck(facts: Facts) -> Finding | None:
    main = [p for p in facts.procs if _frames(p, "_try_get_data", file="torch/utils/data/dataloader.py")]
    workers = [p for p in facts.procs if p.role.startswith("DataLoader worker")]
    busy = [w for w in workers if _frames(w, "fetch", "__getitem__", "__getitems__")]
    if not main or not busy:
        return None
    return Finding(
        "a DataLoader waiting for a worker stuck inside your dataset (a stalled read, a lock, a hang of its own)",
        [_stack_line(main[0])] + [_stack_line(w) for w in busy[:3]],
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


HANG_RULES = (
    fork_after_openmp,
    lock_held_at_fork,
    join_before_drain,
    missing_main_guard,
    killed_pool_worker,
    waiting_in_collective,
    waiting_for_store,
    full_shm,
    dataloader_worker_stuck,
    dead_producer,
)


def diagnose_hang(facts: Facts) -> list[Finding]:
    """Every finding, strongest first (the first rule listed wins a tie)."""
    found = [f for rule in HANG_RULES if (f := rule(facts)) is not None]
    return sorted(found, key=lambda f: -f.score)
