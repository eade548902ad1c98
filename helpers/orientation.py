"""Chapter 00, Orientation: processes vs threads, start methods, and torch's own threads.

Every function that runs in a child process lives here (not in the notebook) because spawn and
forkserver children re-import their target by module and name. Only the standard library is imported at
the top: a spawned child that just burns CPU should not pay a second for `import torch`.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from helpers.environment import default_start_method, usable_cores
from helpers.processes import running
from helpers.validate import positive_int

__all__ = [
    "busy",
    "busy_and_report",
    "square",
    "COUNTER",
    "read_counter",
    "thread_count",
    "parallel_sum",
    "acquire",
    "fork_while_a_thread_holds_a_lock",
    "call_in_spawned_child",
    "ThreadsVsProcesses",
    "threads_vs_processes",
    "start_cost",
    "oversubscription",
]

COUNTER = 0  # module state: a forked child sees the parent's value, a spawned child re-imports it


def busy(n: int) -> int:
    """Pure-Python CPU work: holds the GIL the whole time, so threads cannot run it in parallel."""
    positive_int("n", n, minimum=0)
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


def busy_and_report(barrier: Any, n: int, results: Any) -> None:
    """Wait at `barrier` until every process has started, run `busy(n)`, put the answer on `results`.

    The target of the notebook's first bare `Process`: it returns nothing, because a process has no
    return value; what it wants to say goes through a queue.
    """
    barrier.wait(timeout=60)
    results.put(busy(n))


def square(x: float) -> float:
    """A trivial target that spawn children can import, unlike one defined in a notebook."""
    return x * x


def read_counter() -> int:
    """What the child sees of `COUNTER` (set in the parent before the child starts)."""
    return COUNTER


def thread_count() -> int:
    """Threads alive in this process: a forked child has only the thread that called fork."""
    return threading.active_count()


def parallel_sum(threads: int) -> float:
    """Sum 4 million ones with `threads` torch threads: a parallel OpenMP op when threads > 1."""
    import torch

    torch.set_num_threads(positive_int("threads", threads))
    return float(torch.ones(4_000_000).sum())


def acquire(lock: Any) -> str:
    """Take a lock, the way a library call inside a child would."""
    with lock:
        return "acquired"


def fork_while_a_thread_holds_a_lock(timeout: float = 2.0) -> Any:
    """Fork while another thread of this process holds a lock; the child waits for it forever.

    The child gets a copy of the lock in its locked state, but not the thread that would release it.
    Returns the watchdog's outcome; the holding thread is released and joined before returning.
    """
    from helpers import watchdog

    lock = threading.Lock()
    release = threading.Event()
    taken = threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold, name="lock-holder")
    holder.start()
    try:
        taken.wait(5)
        return watchdog.run(acquire, lock, timeout=timeout, start_method="fork", expect="hang")
    finally:
        release.set()
        holder.join(5)


def _send_result(conn: Connection, fn: Any, args: tuple[Any, ...]) -> None:
    conn.send(fn(*args))
    conn.close()


def call_in_spawned_child(fn: Any, *args: Any, timeout: float = 20.0) -> Any:
    """Run `fn(*args)` in a spawn child and return its result, or raise if the child fails.

    This is what `Pool.map` and `Process(target=...)` do under spawn: the child unpickles `fn` by
    module and name, so a function defined in a notebook (module `__main__`) cannot be found there.
    """
    ctx = mp.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_send_result, args=(sender, fn, args))
    got, value = False, None
    with running([proc], timeout=timeout):
        sender.close()
        if receiver.poll(timeout):  # also true when the child died and closed its end
            with contextlib.suppress(EOFError):
                value, got = receiver.recv(), True
        proc.join(timeout)
    receiver.close()
    if not got:
        raise ChildProcessError(f"the spawned child exited with code {proc.exitcode} and sent no result")
    return value


def _busy_after_barrier(barrier: Any, n: int, conn: Connection) -> None:
    barrier.wait()
    conn.send(busy(n))
    conn.close()


@dataclass
class ThreadsVsProcesses:
    """Seconds for the same pure-Python work: once alone, then on `workers` threads or processes."""

    workers: int
    start_method: str
    one_worker: float  # one piece of work in this process
    threads: float  # `workers` pieces on `workers` threads
    processes: float  # `workers` pieces on `workers` processes, timed from a barrier after start-up
    process_startup: float  # from the first start() to every process waiting at the barrier

    @property
    def serial(self) -> float:
        """The baseline: the `workers` pieces run one after another (`workers` x one piece alone)."""
        return self.workers * self.one_worker

    @property
    def threads_speedup(self) -> float:
        """serial / threads: about 1 with the GIL (below 1 when switching between threads costs)."""
        return self.serial / self.threads

    @property
    def processes_speedup(self) -> float:
        """serial / processes: at most `workers` (every core busy with one piece)."""
        return self.serial / self.processes

    @property
    def ratio(self) -> float:
        """threads / processes = processes_speedup / threads_speedup. It can exceed `workers` when threads
        are slower than running the pieces one after another; the speed-ups over `serial` cannot."""
        return self.threads / self.processes


def threads_vs_processes(
    n: int = 2_000_000, workers: int | None = None, start_method: str | None = None
) -> ThreadsVsProcesses:
    """Time `workers` copies of `busy(n)` on threads and on processes (start-up timed apart)."""
    workers = usable_cores() if workers is None else workers
    positive_int("workers", workers)
    positive_int("n", n)

    t0 = time.perf_counter()
    busy(n)
    one = time.perf_counter() - t0

    gate = threading.Barrier(workers + 1)
    pool = [threading.Thread(target=lambda: (gate.wait(), busy(n))) for _ in range(workers)]
    for thread in pool:
        thread.start()
    gate.wait()
    t0 = time.perf_counter()
    for thread in pool:
        thread.join()
    threads = time.perf_counter() - t0

    ctx = mp.get_context(start_method or default_start_method())
    barrier = ctx.Barrier(workers + 1)
    pipes = [ctx.Pipe(duplex=False) for _ in range(workers)]
    procs = [ctx.Process(target=_busy_after_barrier, args=(barrier, n, s)) for _, s in pipes]
    t_start = time.perf_counter()
    with running(procs):
        for _, sender in pipes:
            sender.close()
        barrier.wait(timeout=120)
        t0 = time.perf_counter()
        for receiver, _ in pipes:
            if not receiver.poll(120):
                raise ChildProcessError("a worker process sent no result within 120 s")
            receiver.recv()
        processes = time.perf_counter() - t0
    for receiver, _ in pipes:
        receiver.close()
    del barrier
    return ThreadsVsProcesses(workers, ctx.get_start_method(), one, threads, processes, t0 - t_start)


def _report_ready(conn: Connection) -> None:
    import torch  # noqa: F401 - importing it is the cost being measured

    conn.send("ready")
    conn.close()


def start_cost(methods: Sequence[str] | None = None, repeats: int = 2) -> dict[str, Any]:
    """Seconds from `start()` until a child that imports torch is ready, per start method, as a
    `timing.Spread` (median and range of `repeats` starts).

    The parent imports torch first, as a notebook has: a forked child inherits it, a spawned or
    forkserver child imports it again (forkserver's server is started on first use, and it does not
    preload torch unless told to with `set_forkserver_preload`).
    """
    import torch  # noqa: F401 - inherited by fork children

    from helpers.timing import spread

    available = mp.get_all_start_methods()
    methods = list(available if methods is None else methods)
    for method in methods:
        if method not in available:
            raise ValueError(f"methods must be among {available} on this platform, got {method!r}")
    positive_int("repeats", repeats)
    result = {}
    for method in methods:
        ctx = mp.get_context(method)
        times = []
        for _ in range(repeats):
            receiver, sender = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_report_ready, args=(sender,))
            t0 = time.perf_counter()
            with running([proc]):
                sender.close()
                if not receiver.poll(120):
                    raise ChildProcessError(f"a {method} child was not ready within 120 s")
                receiver.recv()
                times.append(time.perf_counter() - t0)
            receiver.close()
        result[method] = spread(times)
    return result


def _matmul_worker(conn: Connection) -> None:
    """Serve timing requests: ("run", threads, matmuls, start_at) -> (start, end) wall-clock times."""
    import torch

    a = torch.randn(256, 256)
    conn.send("ready")
    while True:
        message = conn.recv()
        if message is None:
            break
        _, threads, matmuls, start_at = message
        torch.set_num_threads(threads)
        a @ a  # warm up this thread count's OpenMP team outside the timed part
        time.sleep(max(0.0, start_at - time.time()))
        t0 = time.time()
        for _ in range(matmuls):
            a @ a
        conn.send((t0, time.time()))
    conn.close()


@contextlib.contextmanager
def _environment(**values: str | None) -> Iterator[None]:
    """Set environment variables while children are started (a spawned child copies the environment at
    start-up, and libgomp reads OMP_WAIT_POLICY once, when torch loads it), then restore them."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def oversubscription(
    configs: Sequence[tuple[int, int]] | None = None,
    matmuls: int = 1200,
    rounds: int = 1,
    wait_policy: str | None = None,
) -> dict[tuple[int, int], Any]:
    """Seconds to do `matmuls` 256x256 matrix products split over M processes with N threads each, as a
    `timing.Spread` over `rounds` rounds (each round runs every configuration once, interleaved, so a
    burst of load from another program hits all configurations alike).

    The same total work in every configuration `(M, N)`, so the times compare directly. Workers are
    spawned (a forked child of a kernel would hang in OpenMP as soon as it uses two threads), started
    once and reused, and each run starts at an agreed wall-clock instant, so start-up is not timed.
    `wait_policy` sets `OMP_WAIT_POLICY` in the workers ("PASSIVE": a waiting OpenMP thread sleeps at
    once instead of spinning; "ACTIVE": it spins; None: the workers inherit this process's setting).
    """
    from helpers.timing import spread

    cores = usable_cores()
    if configs is None:
        configs = [(1, 1), (1, cores), (cores, 1), (cores, cores), (cores, 2 * cores)]
    configs = [tuple(c) for c in configs]
    for config in configs:
        if len(config) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in config):
            raise ValueError(f"configs must be (processes, threads) pairs of ints >= 1, got {config!r}")
    positive_int("matmuls", matmuls)
    positive_int("rounds", rounds)
    if wait_policy not in (None, "PASSIVE", "ACTIVE"):
        raise ValueError(f"wait_policy must be None, 'PASSIVE' or 'ACTIVE', got {wait_policy!r}")
    most = max(m for m, _ in configs)
    ctx = mp.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(most)]
    procs = [ctx.Process(target=_matmul_worker, args=(child,)) for _, child in pipes]
    times: dict[tuple[int, int], list[float]] = {config: [] for config in configs}
    with contextlib.ExitStack() as stack:
        with _environment(OMP_WAIT_POLICY=wait_policy) if wait_policy else contextlib.nullcontext():
            stack.enter_context(running(procs, timeout=10))  # started here: the kernel's own setting returns
        for conn, child in pipes:
            child.close()
            if not conn.poll(120) or conn.recv() != "ready":
                raise ChildProcessError("a matmul worker did not start within 120 s")
        for _ in range(rounds):
            for m, n in configs:
                times[(m, n)].append(_timed_run(pipes[:m], n, matmuls // m))
        for conn, _ in pipes:
            conn.send(None)
    for conn, _ in pipes:
        conn.close()
    return {config: spread(values) for config, values in times.items()}


def _timed_run(pipes: Sequence[tuple[Connection, Connection]], threads: int, matmuls: int) -> float:
    """One configuration once: every worker starts at the same wall-clock instant; first start to last end."""
    start_at = time.time() + 0.3
    for conn, _ in pipes:
        conn.send(("run", threads, matmuls, start_at))
    spans = []
    for conn, _ in pipes:
        if not conn.poll(120):
            raise ChildProcessError("a matmul worker did not answer within 120 s")
        spans.append(conn.recv())
    return max(end for _, end in spans) - min(start for start, _ in spans)
