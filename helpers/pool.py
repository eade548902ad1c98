"""Chapter 04, Pool vs Process: the worker functions and experiments of the notebook and of two bench
figures (`pool_chunksize`, `pool_io_scaling`). What each API does when a worker is killed, section 6, is
in `helpers.worker_deaths`.

This module imports no torch at the top, on purpose: a spawn Pool worker imports the module its task
function lives in, and most tasks here are plain Python (a sleep, a square). Importing torch would cost
each spawned worker about a second on a 2-core laptop. Functions that need torch import it inside.

Conventions as in the other chapters: children never print, they return; every wait has a timeout; every
process, pool and queue is gone when a function returns. Pools that are timed start their workers on a
Barrier, so the time excludes start-up, which is reported beside it.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from helpers.environment import default_context
from helpers.errors import short_error
from helpers.processes import (
    collected_after,
    join_spawned,
    live_workers,
    mp_context,
    quiet_spawn_log,
    remove_error_files,
    running,
)
from helpers.threads import torch_threads
from helpers.validate import non_negative, positive_int

if TYPE_CHECKING:
    import torch

__all__ = [
    "UNIT",
    "delayed_square",
    "power",
    "put_square",
    "meet",
    "in_a_loop",
    "ProcessRun",
    "with_processes",
    "with_pool",
    "pool_error",
    "with_spawn",
    "spawn_failure",
    "CollectRun",
    "collect_and_train",
    "scaling",
    "tiny",
    "default_chunksize",
    "map_seconds",
    "Tracked",
    "pickles_per_task",
    "try_map",
    "notebook_function_in_spawn_pool",
    "seeded_draws",
    "pending_after_exit",
    "worker_pids",
    "loader_in_pool_worker",
    "simulate_makespan",
    "tail_heavy_durations",
    "run_pipeline",
]

UNIT = 0.1  # seconds: item x sleeps UNIT * x(x+1)/2, so later items finish well after earlier ones
_WAIT = 60.0  # seconds: bound for any single get/join (spawn workers that import torch start slowly)


def _released(*objects: Any) -> None:
    """Close queues and collect cycles now: under spawn, a queue's or pool's semaphores are files in
    /dev/shm until collected, and nbval kills the kernel without collecting."""
    for obj in objects:
        if hasattr(obj, "close") and hasattr(obj, "join_thread"):
            obj.close()
            obj.join_thread()
    gc.collect()


# ---- one job, five ways ------------------------------------------------------------------------------


def delayed_square(x: int) -> int:
    """The course's stand-in for a task: wait UNIT * x(x+1)/2 seconds, return x squared.

    Larger items take much longer, so the order in which results come back is predictable even when a
    worker happens to take two items in a row. A negative item raises, to show how errors travel.
    """
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"x must be an int, got {type(x).__name__}")
    if x < 0:
        raise ValueError(f"item must be >= 0, got {x}")
    time.sleep(UNIT * x * (x + 1) / 2)
    return x * x


def put_square(results: Any, x: int) -> None:
    """Process target for the first, bare example: put x squared on the `results` queue."""
    results.put(x * x)


def meet(barrier: Any, timeout: float = _WAIT) -> None:
    """Process target for the bare `Barrier` example: wait until every party has arrived. After
    `timeout` seconds the barrier breaks (`BrokenBarrierError` here and in every waiting party) instead
    of hanging, for example when a party died before it arrived."""
    barrier.wait(timeout)


def power(base: int, exponent: int) -> int:
    """A task with two arguments, for `starmap`."""
    return base**exponent


def in_a_loop(items: Sequence[int]) -> list[int]:
    """The baseline: every item in this process, one after the other."""
    return [delayed_square(x) for x in items]


def _queue_worker(tasks: Any, results: Any, catch: bool, ready: Any) -> None:
    """Process target: take (index, item) until None; answer (index, ok, value or exception)."""
    ready.wait(_WAIT)  # a Barrier: start together, so who takes which item does not depend on start-up
    while True:
        job = tasks.get()
        if job is None:
            return
        index, item = job
        if not catch:
            results.put((index, True, delayed_square(item)))  # an exception kills this process
            continue
        try:
            results.put((index, True, delayed_square(item)))
        except Exception as exc:  # noqa: BLE001 - sent to the parent, which decides
            results.put((index, False, exc))


@dataclass
class ProcessRun:
    """What `with_processes` saw: results in input order, the order they arrived in, exit codes."""

    results: list[int]
    arrival: list[int]
    exitcodes: list[int | None]


def with_processes(
    items: Sequence[int], workers: int = 4, catch: bool = True, start_method: str | None = None
) -> ProcessRun:
    """`Process` workers fed by an explicit task queue, answering on a result queue.

    Results arrive in completion order, tagged with their index; the parent puts them back in order. A
    worker's exception comes back as a value and is re-raised here (after every worker has stopped).
    With `catch=False` the worker dies instead, and the parent notices only because it watches the exit
    codes while it waits: a plain `results.get()` would wait forever.
    """
    positive_int("workers", workers)
    items = list(items)
    ctx = mp_context(start_method)
    tasks, results, ready = ctx.Queue(), ctx.Queue(), ctx.Barrier(workers + 1)
    procs = [ctx.Process(target=_queue_worker, args=(tasks, results, catch, ready)) for _ in range(workers)]
    got: dict[int, int] = {}
    arrival: list[int] = []
    failure: BaseException | None = None
    try:
        with running(procs, timeout=_WAIT):
            ready.wait(_WAIT)
            for job in enumerate(items):
                tasks.put(job)
            for _ in procs:
                tasks.put(None)  # one stop sign per worker
            deadline = time.monotonic() + _WAIT
            while len(arrival) < len(items):
                try:
                    index, ok, value = results.get(timeout=0.1)
                except queue.Empty:
                    dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                    if dead:
                        raise ChildProcessError(
                            f"a worker exited with code {dead[0]} and its result will never come"
                        ) from None
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"no result within {_WAIT:g} s") from None
                    continue
                arrival.append(index)
                if ok:
                    got[index] = value
                elif failure is None:
                    failure = value
    finally:
        _released(tasks, results)
        del tasks, results, ready
    if failure is not None:
        raise failure
    return ProcessRun([got[i] for i in range(len(items))], arrival, [p.exitcode for p in procs])


@contextlib.contextmanager
def _started_pool(
    workers: int, start_method: str | None = None, initializer: Callable[..., Any] | None = None, initargs: tuple = ()
) -> Iterator[tuple[Any, float]]:
    """A Pool whose workers have all run their initializer (then met on a Barrier) before we go on.

    Yields (pool, seconds it took to start); on leaving, closes and joins the pool if the block
    finished, terminates it if the block raised, and releases its semaphores.
    """
    ctx = mp_context(start_method)
    barrier = ctx.Barrier(workers + 1)
    t0 = time.perf_counter()
    pool = ctx.Pool(workers, initializer=_init_then_wait, initargs=(barrier, initializer, initargs))
    try:
        barrier.wait(_WAIT)
        startup = time.perf_counter() - t0
        yield pool, startup
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()  # returns at once after terminate(); after close(), when the queued tasks are done
        del pool, barrier
        gc.collect()


def _init_then_wait(barrier: Any, initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    if initializer is not None:
        initializer(*initargs)
    barrier.wait(_WAIT)


def with_pool(items: Sequence[int], workers: int = 4, start_method: str | None = None) -> dict[str, list[int]]:
    """The same items through each way a Pool hands out work; results as each method returns them."""
    positive_int("workers", workers)
    items = list(items)
    out: dict[str, list[int]] = {}
    with _started_pool(workers, start_method) as (pool, _):
        out["map"] = pool.map(delayed_square, items, chunksize=1)
        out["imap"] = list(pool.imap(delayed_square, items))
        out["imap_unordered"] = list(pool.imap_unordered(delayed_square, items))
        out["starmap"] = pool.starmap(power, [(x, 2) for x in items])
        pending = [pool.apply_async(delayed_square, (x,)) for x in items]
        out["apply_async"] = [result.get(timeout=_WAIT) for result in pending]
    return out


@collected_after  # an apply_async result left in the pool's cache keeps the pool in a cycle
def pool_error(items: Sequence[int], method: str = "map", start_method: str | None = None) -> str:
    """Run items (one of them negative) through a Pool; return the error the parent got, as one line."""
    if method not in ("map", "imap", "apply_async"):
        raise ValueError(f"method must be 'map', 'imap' or 'apply_async', got {method!r}")
    with _started_pool(2, start_method) as (pool, _):
        try:
            if method == "map":
                pool.map(delayed_square, items, chunksize=1)
            elif method == "imap":
                list(pool.imap(delayed_square, items))
            else:
                for result in [pool.apply_async(delayed_square, (x,)) for x in items]:
                    result.get(timeout=_WAIT)
        except Exception as exc:  # noqa: BLE001 - the point is to show what arrives
            return short_error(exc)
    return "no error"


# ---- torch.multiprocessing.spawn ----------------------------------------------------------------------


def _spawn_rank(rank: int, items: list[int], out: torch.Tensor, nprocs: int, gate: Any = None) -> None:
    """spawn target, called as fn(rank, *args): rank r squares items r, r + nprocs, ... into `out`.

    With a `gate` (a semaphore), rank 0 first waits until the parent releases it, so the parent's first
    blocking `join()` surely returns while rank 0 still runs: `join()` answers when *any* rank has ended."""
    if gate is not None and rank == 0:
        gate.acquire(timeout=_WAIT)
    for index in range(rank, len(items), nprocs):
        out[index] = delayed_square(items[index])


def _fail_or_wait(rank: int, seconds: float, ready: Any = None, saved: Any = None) -> None:
    """spawn target: rank 1 fails; the others would work for `seconds`.

    With `saved` (a shared tensor, one slot per rank), the last rank installs a SIGTERM handler that
    writes 1 into its slot (its "last snapshot") and exits with code 0: the only way a rank learns that
    `join` is ending the job. With `ready` (a Barrier for all ranks), rank 1 fails only once every rank
    has started and installed its handler, so the SIGTERM cannot arrive before the handler is in place."""
    if saved is not None and rank == len(saved) - 1:
        import signal
        import sys

        def save_and_exit(signum: int, frame: Any) -> None:
            saved[rank] = 1
            sys.exit(0)

        signal.signal(signal.SIGTERM, save_and_exit)
    if ready is not None:
        ready.wait(_WAIT)
    if rank == 1:
        raise ValueError("rank 1 failed on purpose")
    time.sleep(seconds)


def with_spawn(items: Sequence[int], nprocs: int = 4, timeout: float = _WAIT) -> dict[str, Any]:
    """`torch.multiprocessing.spawn` with join=False: the ranks write results into a shared tensor
    (spawn returns nothing). Rank 0 waits on a gate until the first blocking `join()` has returned, which
    shows that `join()` answers once *any* rank has ended (False while others run); then the context is
    joined in a loop with a deadline, as `spawn(join=True)` does with `while not context.join(): pass`."""
    import torch
    import torch.multiprocessing as tmp

    positive_int("nprocs", nprocs, minimum=2)
    non_negative("timeout", timeout)
    items = list(items)
    out = torch.full((len(items),), -1, dtype=torch.long).share_memory_()
    gate = tmp.get_context("spawn").Semaphore(0)
    with quiet_spawn_log():
        context = tmp.spawn(_spawn_rank, args=(items, out, nprocs, gate), nprocs=nprocs, join=False)
        try:
            report: dict[str, Any] = {"returned": type(context).__name__}
            report["join(timeout=0) right after start"] = context.join(timeout=0)
            report["first join() while rank 0 waits"] = context.join(timeout=timeout)
            report["rank 0 still running then"] = context.processes[0].is_alive()
            gate.release()
            join_spawned(context, timeout)
            report["join() at the end"] = context.join()
        finally:
            gate.release()  # rank 0 must not wait out its timeout if something above failed
            remove_error_files(context)
    report["results"] = out.tolist()
    report["exit codes"] = [p.exitcode for p in context.processes]
    del gate
    gc.collect()  # a spawn-context semaphore is a file in /dev/shm until collected
    return report


def spawn_failure(
    nprocs: int = 2, seconds: float = 30.0, timeout: float = _WAIT, save_on_sigterm: bool = False
) -> dict[str, Any]:
    """Rank 1 raises while the others work: what the parent gets, and what happens to the others.

    `save_on_sigterm=True` (needs nprocs >= 3) gives the last rank a SIGTERM handler that saves and
    exits, while rank 0 has none: the report's "saved by its SIGTERM handler" says which rank could save.
    All ranks then meet on a Barrier first, so rank 1 fails only once every handler is installed."""
    import torch
    import torch.multiprocessing as tmp

    positive_int("nprocs", nprocs, minimum=3 if save_on_sigterm else 2)
    if not isinstance(save_on_sigterm, bool):
        raise TypeError(f"save_on_sigterm must be True or False, got {type(save_on_sigterm).__name__}")
    ready = saved = None
    if save_on_sigterm:
        ready = tmp.get_context("spawn").Barrier(nprocs)
        saved = torch.zeros(nprocs, dtype=torch.long).share_memory_()
    with quiet_spawn_log():
        context = tmp.spawn(_fail_or_wait, args=(seconds, ready, saved), nprocs=nprocs, join=False)
        try:
            join_spawned(context, timeout)
        except tmp.ProcessRaisedException as exc:
            report = {
                "raised": short_error(exc),
                "original error (last line)": short_error(exc, line="last"),
                "error_index": exc.error_index,
            }
        else:
            report = {"raised": "nothing"}
        finally:
            remove_error_files(context)
    report["exit codes"] = [p.exitcode for p in context.processes]
    if saved is not None:
        report["saved by its SIGTERM handler"] = [bool(flag) for flag in saved.tolist()]
    del ready
    gc.collect()  # a spawn-context Barrier's semaphores are files in /dev/shm until collected
    return report


# ---- data collection feeding Hogwild training --------------------------------------------------------

_FEATURES = 8
_BATCH = 32
_STATE: dict[str, Any] = {}  # per worker process: the shared model and logs, set by _init_collector


@dataclass
class CollectRun:
    """One run of the data-collection workload. `log[p, k]` is the loss of process p's k-th step (NaN
    where it took fewer), `combined[t]` the loss of task t; `seconds` excludes start-up."""

    way: str
    workers: int
    kind: str
    seconds: float
    startup: float
    log: Any = field(repr=False)
    combined: Any = field(repr=False)
    weight_error: float = 0.0

    @property
    def tasks_per_s(self) -> float:
        return len(self.combined) / self.seconds


def _true_weight() -> torch.Tensor:
    import torch

    return torch.linspace(-1.0, 1.0, _FEATURES).unsqueeze(1)


def _init_collector(model: Any, log: Any, combined: Any, counter: Any, kind: str, delay: float, lr: float) -> None:
    """Worker set-up: one torch thread (fork-safe, no oversubscription), a worker number, the shared state."""
    import torch

    torch.set_num_threads(1)
    with counter.get_lock():
        index = counter.value
        counter.value += 1
    _STATE.update(model=model, log=log, combined=combined, kind=kind, delay=delay, lr=lr, index=index, steps=0)


def get_data(task: int, kind: str, delay: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The slow "get data" step (an environment, a disk, a web service): `delay` seconds of waiting
    (kind="io") or of CPU work (kind="cpu"), then a batch of the regression y = x @ w + noise."""
    import torch

    if kind == "io":
        time.sleep(delay)
    else:
        end = time.thread_time() + delay
        spins = 0
        while time.thread_time() < end:  # busy: this process's own CPU time, so contention slows it
            spins += 1
    g = torch.Generator().manual_seed(task)
    x = torch.randn(_BATCH, _FEATURES, generator=g)
    y = x @ _true_weight() + 0.1 * torch.randn(_BATCH, 1, generator=g)
    return x, y


def _collect_step(task: int) -> int:
    """Pool task: collect one batch, take one lock-free SGD step on the shared model, log the loss."""
    import torch

    s = _STATE
    x, y = get_data(task, s["kind"], s["delay"])
    model = s["model"]
    loss = ((model(x) - y) ** 2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= s["lr"] * p.grad  # Hogwild: no lock; other processes update the same memory meanwhile
    s["log"][s["index"], s["steps"]] = loss.item()
    s["combined"][task] = loss.item()
    s["steps"] += 1
    return s["index"]


def _collector_process(tasks: Any, done: Any, barrier: Any, state: tuple) -> None:
    """Process target: the same steps as the Pool's, fed from an explicit task queue until None."""
    _init_collector(*state)
    barrier.wait(_WAIT)
    while (task := tasks.get()) is not None:
        _collect_step(task)
    done.put(_STATE["steps"])


def collect_and_train(
    workers: int,
    tasks: int = 48,
    kind: str = "io",
    delay: float = 0.02,
    way: str = "pool",
    lr: float = 0.1,
    start_method: str | None = None,
) -> CollectRun:
    """`tasks` steps of "get data (delay s), then one SGD step on a shared model", spread over `workers`
    processes: a Pool (`way="pool"`), Process objects with a task queue ("process"), or this process
    alone ("loop", workers must be 1). Every process writes its losses into shared tensors.

    fork, given or the platform's default, becomes spawn where a forked child's backward would fail
    after a backward in this process (a CUDA build that sees a GPU: `helpers.hogwild.fork_breaks_autograd`);
    the start method only changes the start-up time, which is reported apart."""
    import torch

    positive_int("workers", workers)
    positive_int("tasks", tasks)
    non_negative("delay", delay)
    if kind not in ("io", "cpu"):
        raise ValueError(f"kind must be 'io' or 'cpu', got {kind!r}")
    if way not in ("pool", "process", "loop"):
        raise ValueError(f"way must be 'pool', 'process' or 'loop', got {way!r}")
    if way == "loop" and workers != 1:
        raise ValueError(f"way='loop' runs in this process: workers must be 1, got {workers}")
    if way != "loop":
        from helpers.hogwild import children_start_method

        mp_context(start_method)  # a ValueError naming start_method for a method this platform lacks
        start_method = children_start_method(start_method)
    torch.manual_seed(0)
    model = torch.nn.Linear(_FEATURES, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    model.share_memory()
    log = torch.full((workers, tasks), float("nan")).share_memory_()
    combined = torch.full((tasks,), float("nan")).share_memory_()
    ctx = mp_context(start_method)
    counter = ctx.Value("i", 0)
    state = (model, log, combined, counter, kind, delay, lr)
    if way == "loop":
        try:
            with torch_threads():  # _init_collector sets one thread here too: the workers get one each
                _init_collector(*state)
                t0 = time.perf_counter()
                for task in range(tasks):
                    _collect_step(task)
                seconds, startup = time.perf_counter() - t0, 0.0
        finally:
            _STATE.clear()
    elif way == "pool":
        with _started_pool(workers, start_method, _init_collector, state) as (pool, startup):
            t0 = time.perf_counter()
            pool.map(_collect_step, range(tasks), chunksize=1)
            seconds = time.perf_counter() - t0
    else:
        seconds, startup = _run_collector_processes(ctx, workers, tasks, state)
    error = float((model.weight.detach().T - _true_weight()).abs().max())
    del counter
    gc.collect()
    return CollectRun(way, workers, kind, seconds, startup, log.clone(), combined.clone(), error)


def _run_collector_processes(ctx: Any, workers: int, tasks: int, state: tuple) -> tuple[float, float]:
    queue_in, done, barrier = ctx.Queue(), ctx.Queue(), ctx.Barrier(workers + 1)
    procs = [ctx.Process(target=_collector_process, args=(queue_in, done, barrier, state)) for _ in range(workers)]
    t_start = time.perf_counter()
    try:
        with running(procs, timeout=_WAIT):
            barrier.wait(_WAIT)
            t0 = time.perf_counter()
            for task in range(tasks):
                queue_in.put(task)
            for _ in procs:
                queue_in.put(None)
            steps = sum(done.get(timeout=_WAIT) for _ in procs)
            seconds = time.perf_counter() - t0
        if steps != tasks:
            raise RuntimeError(f"workers report {steps} steps for {tasks} tasks")
    finally:
        _released(queue_in, done)
        del queue_in, done, barrier
    return seconds, t0 - t_start


def scaling(
    workers: Sequence[int], tasks: int = 48, kind: str = "io", delay: float = 0.02, start_method: str | None = None
) -> dict[int, CollectRun]:
    """`collect_and_train` on a Pool for each worker count (speed-up = tasks_per_s / that of 1 worker)."""
    if not workers or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in workers):
        raise ValueError(f"workers must be a non-empty list of ints >= 1, got {workers!r}")
    return {w: collect_and_train(w, tasks, kind, delay, "pool", start_method=start_method) for w in workers}


# ---- per-task overhead and pickling ------------------------------------------------------------------


def tiny(x: int) -> int:
    """A task that costs almost nothing, so a Pool's per-task overhead is all there is to measure."""
    return x + 1


def default_chunksize(tasks: int, workers: int) -> int:
    """The chunksize `Pool.map` picks when given none (CPython's rule): about tasks / (4 x workers),
    rounded up. `imap` and `imap_unordered` default to 1 instead."""
    positive_int("tasks", tasks, minimum=0)
    positive_int("workers", workers)
    if tasks == 0:
        return 0
    chunksize, extra = divmod(tasks, workers * 4)
    return chunksize + 1 if extra else chunksize


def map_seconds(
    tasks: int, workers: int, chunksizes: Sequence[int | None], repeats: int = 1, start_method: str | None = None
) -> tuple[dict[int | None, float], float]:
    """Seconds for `Pool.map(tiny, range(tasks), chunksize=c)` for each c (None = map's default), all on
    one pool started beforehand (median of `repeats`); and the pool's start-up seconds."""
    positive_int("tasks", tasks)
    positive_int("workers", workers)
    positive_int("repeats", repeats)
    for c in chunksizes:
        if c is not None:
            positive_int("chunksize", c)
    if not chunksizes:
        raise ValueError("chunksizes must name at least one chunksize (None = the default)")
    seconds: dict[int | None, float] = {}
    with _started_pool(workers, start_method) as (pool, startup):
        for c in chunksizes:
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                pool.map(tiny, range(tasks), chunksize=c)
                times.append(time.perf_counter() - t0)
            seconds[c] = sorted(times)[len(times) // 2]
    return seconds, startup


class Tracked:
    """An object that counts how often it is pickled in this process (class attribute `pickled`)."""

    pickled = 0

    def __reduce__(self) -> tuple[type, tuple]:
        Tracked.pickled += 1
        return (Tracked, ())


def _ignore(*args: Any) -> None:
    return None


def pickles_per_task(tasks: int = 8, workers: int = 2, start_method: str | None = None) -> dict[str, int]:
    """How often an object is pickled when each task gets one as its argument, and when it is handed to
    the workers once, as an initializer argument."""
    positive_int("tasks", tasks)
    positive_int("workers", workers)
    ctx = mp_context(start_method)
    Tracked.pickled = 0
    pool = ctx.Pool(workers, initializer=_ignore, initargs=(Tracked(),))
    try:
        as_initarg = Tracked.pickled
        pool.map(_ignore, [Tracked() for _ in range(tasks)], chunksize=1)
        per_task = Tracked.pickled - as_initarg
        pool.close()
    finally:
        pool.terminate()
        pool.join()
        del pool
        gc.collect()
    return {"one per task, as map arguments": per_task, "one for all, as initargs": as_initarg}


def try_map(fn: Callable[[Any], Any], items: Sequence[Any], start_method: str | None = None) -> str:
    """`Pool.map(fn, items)` on a small pool: the results, or the error the parent got, as one line."""
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    return _one_worker_answer(lambda pool: pool.map(fn, items), start_method)


def _one_worker_answer(ask: Callable[[Any], Any], start_method: str | None) -> str:
    """`ask(pool)` on a one-worker pool: "returned <value>", or the error the parent got, as one line."""
    ctx = mp_context(start_method)
    with ctx.Pool(1) as pool:
        try:
            answer = f"returned {ask(pool)}"
        except Exception as exc:  # noqa: BLE001 - the point is to show what arrives
            answer = short_error(exc)
    del pool
    gc.collect()
    return answer


def _count_start(started: Any) -> None:
    """Pool initializer: count this worker's start. Deaths are counted as starts minus live workers, so a
    replacement that starts and dies between two looks at the pool (a busy machine) is not missed."""
    with started.get_lock():
        started.value += 1


def notebook_function_in_spawn_pool(
    fn: Callable[[int], Any], wait: float = 3.0, workers: int = 2, tasks: int = 4
) -> dict[str, Any]:
    """Map `fn` over `tasks` items (chunksize 1) on a spawn Pool, wait `wait` seconds for the result, then
    watch the workers until every task has been taken, and terminate the pool.

    A function defined in a notebook lives in the kernel's `__main__`, which spawned workers cannot
    import. A worker dies while it unpickles a task (`multiprocessing.pool.worker` lets the error end the
    process), and that task is gone with it; the pool starts a replacement, which takes the next task and
    dies too. Once every task has killed one worker, the replacements live and wait for work, and the
    result never comes. Run this under the watchdog (it captures the workers' stderr), forked, with a
    timeout above `wait` + 60 s: on a busy machine the six spawn starts alone took more than 30 s.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {type(fn).__name__}")
    non_negative("wait", wait)
    positive_int("workers", workers)
    positive_int("tasks", tasks)
    spawn = mp.get_context("spawn")
    started = spawn.Value("i", 0)
    pool = spawn.Pool(workers, initializer=_count_start, initargs=(started,))

    try:
        result = pool.map_async(fn, range(tasks), chunksize=1)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and not result.ready():
            result.wait(0.05)
        try:
            result.get(timeout=0)
            timed_out = False
        except mp.TimeoutError:
            timed_out = True
        # Every task kills the worker that takes it, so the pool settles at `tasks` deaths and `workers`
        # idle replacements; on a busy machine the last replacements may still be starting.
        settle = time.monotonic() + _WAIT
        alive = live_workers(pool)
        while time.monotonic() < settle and not (started.value >= tasks + workers and len(alive) == workers):
            time.sleep(0.05)
            alive = live_workers(pool)
        time.sleep(0.3)  # the replacements stay alive: nothing is left that could kill them
        alive = live_workers(pool)
        died = started.value - len(alive)  # every worker that died had started: none is missed
        idle = len(alive) == workers and not result.ready()
    finally:
        pool.terminate()
        pool.join()
    del pool
    gc.collect()
    return {
        f"get(timeout={wait:g}) raised TimeoutError": timed_out,
        f"workers that died, for {tasks} tasks": died,
        "replacements alive, idle, the result never comes": idle,
    }


# ---- pool hygiene ------------------------------------------------------------------------------------


def _seed_worker(counter: Any, base_seed: int | None) -> None:
    """Initializer: one torch thread, a worker number, and (if given) the seed base_seed + number for
    torch's, NumPy's and Python's global generators."""
    import random

    import numpy as np
    import torch

    torch.set_num_threads(1)
    with counter.get_lock():
        _STATE["index"] = counter.value
        counter.value += 1
    if base_seed is not None:
        seed = base_seed + _STATE["index"]
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)


def _draw(_: int) -> tuple[int, int, float, float, float, int]:
    """Task: (pid, worker number or -1, one number from each global generator: torch, NumPy, Python's
    `random`, and torch's thread count)."""
    import random

    import numpy as np
    import torch

    time.sleep(0.05)  # long enough that every worker gets tasks
    return (
        os.getpid(),
        _STATE.get("index", -1),
        torch.rand(1).item(),
        float(np.random.rand()),
        random.random(),
        torch.get_num_threads(),
    )


def seeded_draws(
    initializer: bool, workers: int = 2, tasks: int = 8, base_seed: int = 0, start_method: str | None = None
) -> dict[str, bool]:
    """Draw random numbers from torch's, NumPy's and Python's global generators in pool workers, with or
    without an initializer that seeds each worker. After fork every worker starts from a copy of this
    process's torch and NumPy state, so without an initializer they repeat each other (NumPy 2.4 seeds
    its global generator when `numpy.random` is imported: forked workers repeat once the parent has
    imported it, which this function's first draw does); Python's `random` reseeds itself in every
    forked child (`os.register_at_fork` in `random.py`)."""
    import numpy as np
    import torch

    positive_int("workers", workers, minimum=2)
    positive_int("tasks", tasks, minimum=workers)
    np.random.random()  # as a program that used NumPy's global generator before starting the pool (see above)
    ctx = mp_context(start_method)
    counter = ctx.Value("i", 0)
    init, args = (_seed_worker, (counter, base_seed)) if initializer else (None, ())
    with _started_pool(workers, start_method, init, args) as (pool, _):
        draws = pool.map(_draw, range(tasks), chunksize=1)
    del counter
    firsts: dict[int, tuple[float, float, float]] = {}
    for pid, _, *numbers, _ in draws:
        firsts.setdefault(pid, tuple(numbers))  # map with chunksize 1 keeps each worker's draws in order
    report: dict[str, bool] = {"every worker drew": len(firsts) == workers}
    for position, name in enumerate(("torch", "NumPy", "random")):
        report[f"same first number in every worker: {name}"] = len({f[position] for f in firsts.values()}) == 1
    if initializer:
        index_of = {pid: index for pid, index, *_ in draws}
        expected = {
            pid: torch.rand(1, generator=torch.Generator().manual_seed(base_seed + index_of[pid])).item()
            for pid in firsts
        }
        report["torch draws follow the seed base_seed + worker number"] = all(
            f[0] == expected[pid] for pid, f in firsts.items()
        )
        report["one torch thread per worker"] = {threads for *_, threads in draws} == {1}
    return report


def pending_after_exit(close_first: bool, start_method: str | None = None) -> dict[str, Any]:
    """Submit a 0.6 s task with `apply_async` and leave the Pool's `with` block at once (which calls
    terminate()), or close() and join() first. Then ask for the result."""
    ctx = mp_context(start_method)
    with ctx.Pool(2) as pool:
        result = pool.apply_async(delayed_square, (3,))
        if close_first:
            pool.close()
            pool.join()
    t0 = time.perf_counter()
    try:
        value: Any = result.get(timeout=1)
    except mp.TimeoutError:
        value = "TimeoutError: the task died with the pool"
    waited = time.perf_counter() - t0
    del pool
    gc.collect()
    return {"result": value, "seconds waited": waited}


def _pid(_: int) -> int:
    time.sleep(0.01)
    return os.getpid()


def worker_pids(tasks: int = 6, maxtasksperchild: int | None = 2, start_method: str | None = None) -> list[int]:
    """The pid of the process that ran each task, on a one-worker pool with `maxtasksperchild`."""
    positive_int("tasks", tasks)
    if maxtasksperchild is not None:
        positive_int("maxtasksperchild", maxtasksperchild)
    ctx = mp_context(start_method)
    with ctx.Pool(1, maxtasksperchild=maxtasksperchild) as pool:
        pids = pool.map(_pid, range(tasks), chunksize=1)
    del pool
    gc.collect()
    return pids


def _iterate_loader(num_workers: int) -> int:
    """Task: iterate a small DataLoader with `num_workers` workers inside a pool worker."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=num_workers)
    try:
        return sum(len(batch[0]) for batch in loader)
    except AssertionError as exc:  # "daemonic processes are not allowed to have children"
        error = exc
    # The failed iterator made its queues before starting a worker; under spawn and forkserver their
    # semaphores are files in /dev/shm until collected, and the pool ends this worker with SIGTERM (no
    # clean-up). Drop the traceback that holds them, collect, then raise the same error.
    error.__traceback__ = None
    gc.collect()
    raise error


def loader_in_pool_worker(num_workers: int = 2, start_method: str | None = None) -> str:
    """A DataLoader with workers inside a (daemonic) pool worker: what the parent gets back."""
    positive_int("num_workers", num_workers, minimum=0)
    return _one_worker_answer(lambda pool: pool.apply_async(_iterate_loader, (num_workers,)).get(_WAIT), start_method)


# ---- choosing a chunksize (exercise) -----------------------------------------------------------------


def simulate_makespan(durations: Sequence[float], workers: int, chunksize: int, overhead: float) -> float:
    """Seconds until the last of `workers` finishes, when tasks go out in chunks of `chunksize` in order,
    each chunk to the first free worker, and each chunk costs `overhead` seconds on top of its tasks.

    A model of Pool.map without the noise of a real measurement: small chunks pay overhead many times,
    large chunks can leave one worker with the slow tail while the others idle.
    """
    positive_int("workers", workers)
    positive_int("chunksize", chunksize)
    non_negative("overhead", overhead)
    if not durations:
        raise ValueError("durations must list at least one task")
    free = [0.0] * workers
    for start in range(0, len(durations), chunksize):
        worker = min(range(workers), key=free.__getitem__)
        free[worker] += overhead + sum(durations[start : start + chunksize])
    return max(free)


def tail_heavy_durations(
    tasks: int = 4000, slow: int = 40, fast_s: float = 0.00005, slow_s: float = 0.02
) -> list[float]:
    """Task durations of the exercise: `tasks - slow` fast ones, then `slow` slow ones at the end (say,
    the big files of a folder sorted by name)."""
    positive_int("tasks", tasks)
    positive_int("slow", slow, minimum=0)
    if slow > tasks:
        raise ValueError(f"slow must be <= tasks, got {slow} > {tasks}")
    return [fast_s] * (tasks - slow) + [slow_s] * slow


def run_pipeline(
    fn: Callable[[Any, Sequence[int], Any], list[int]], items: Sequence[int], workers: int = 2, progress: bool = True
) -> list[int]:
    """Call `fn(pool, items, bar)` with a fresh pool and a real progress bar (the exercise's pipeline)."""
    if not callable(fn):
        raise TypeError(f"fn must be a function (pool, items, bar) -> results, got {type(fn).__name__}")
    positive_int("workers", workers)
    import threading

    from tqdm.auto import tqdm

    # tqdm's default lock includes a multiprocessing RLock: under spawn a named semaphore in /dev/shm that
    # outlives a killed kernel. A thread lock is all a bar in this process needs.
    tqdm.set_lock(threading.RLock())
    with default_context().Pool(workers) as pool, tqdm(total=len(items), desc="results", disable=not progress) as bar:
        results = fn(pool, list(items), bar)
        pool.close()
        pool.join()
    del pool
    gc.collect()
    return results
