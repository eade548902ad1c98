"""Chapter 02, shared tensors and queues: every child-process function the notebook runs, and the
measurements behind its plots and the bench.

Conventions: children never print; they answer on a queue or pipe, and the parent prints. Every
process is started inside `helpers.processes.running`, so none outlives its call, and every wait has a
timeout. Functions that hang or crash on purpose are meant to run under `helpers.watchdog`.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import pickle
import resource
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as tmp

from helpers.environment import default_context, default_start_method
from helpers.processes import running
from helpers.validate import positive_int

__all__ = [
    "write_first_element",
    "crossing",
    "handoff_seconds",
    "handoff_table",
    "grad_after_crossing",
    "grow_shared",
    "hold_many_tensors",
    "remove_segments_of",
    "StrategyDataset",
    "set_file_system",
    "strategy_in_loader_workers",
    "early_exit_producer",
    "buffer_reuse",
    "is_shared_after_put",
    "join_before_drain",
    "count_with_value",
    "increment",
    "increment_unlocked",
    "produce_one",
    "shared_loss_log",
    "dataloader_keeping_batches",
    "fd_count",
    "pickled_size",
    "collect_from_producer",
    "count_with_function",
    "file_system_lifecycle",
    "fill_array",
]

_WAIT = 60.0  # seconds: generous bound for any single get/join; spawn children import torch first


def _ctx(start_method: str | None = None) -> Any:
    return tmp.get_context(start_method or default_start_method())


# ---- what crosses a process boundary -------------------------------------------------------------


def write_first_element(inbox: Any, outbox: Any) -> None:
    """Child: take one object, write 42 into its first element, report back, wait to be released."""
    torch.set_num_threads(1)
    obj = inbox.get()
    obj[0] = 42
    outbox.put("written")
    inbox.get()  # keep the object (and its shared memory) alive until the parent has looked


def crossing(kind: str, via: str | None = None) -> dict[str, Any]:
    """Send a tensor or a NumPy array to a child that writes into it; report what the parent sees afterwards.

    `via` picks the queue's module: "torch.multiprocessing" or "multiprocessing" (the standard library's);
    by default a tensor goes through the first, a NumPy array through the second. Both pickle with the
    standard library's ForkingPickler, on which `import torch` has registered torch's tensor reducers, so
    a tensor is shared whichever module made the queue."""
    if kind not in ("tensor", "numpy"):
        raise ValueError(f"kind must be 'tensor' or 'numpy', got {kind!r}")
    if via is None:
        via = "torch.multiprocessing" if kind == "tensor" else "multiprocessing"
    if via not in ("torch.multiprocessing", "multiprocessing"):
        raise ValueError(f"via must be 'torch.multiprocessing', 'multiprocessing' or None, got {via!r}")
    ctx = _ctx() if via == "torch.multiprocessing" else default_context()
    # The parent puts on a SimpleQueue (no feeder thread: the tensor is in shared memory when put()
    # returns) and waits on a Queue, whose get() takes a timeout.
    inbox, outbox = ctx.SimpleQueue(), ctx.Queue()
    obj: Any = torch.zeros(4) if kind == "tensor" else np.zeros(4)
    report: dict[str, Any] = {}
    if kind == "tensor":
        report["shared before sending"] = obj.is_shared()
    child = ctx.Process(target=write_first_element, args=(inbox, outbox))
    with running([child], timeout=_WAIT):
        inbox.put(obj)
        if kind == "tensor":
            report["shared after sending"] = obj.is_shared()
        report["child says"] = outbox.get(timeout=_WAIT)
        report["parent sees the child's write"] = bool(obj[0] == 42)
        inbox.put("release")
    del inbox, outbox
    return report


def _consume(inbox: Any, outbox: Any, mode: str) -> None:
    """Child: receive items until None; touch one element or sum the whole payload; acknowledge."""
    torch.set_num_threads(1)
    while True:
        item = inbox.get()
        if item is None:
            break
        value = float(item[0]) if mode == "touch" else float(item.sum())
        del item
        outbox.put(value)


@dataclass
class Handoff:
    """Seconds for one hand-off (put, receive, use, acknowledge), per way of sending, for one size."""

    nbytes: int
    pickled_numpy: float
    tensor_not_shared: float
    tensor_shared: float


def handoff_seconds(nbytes: int, repeats: int = 3, mode: str = "touch") -> Handoff:
    """Median hand-off time of a float32 payload of `nbytes`, sent three ways to one long-lived child.

    pickled NumPy through `multiprocessing.Queue` (a copy through a pipe); a fresh tensor through a
    `torch.multiprocessing` queue (moved to shared memory on the way: one copy); a tensor already in
    shared memory (only a handle travels). `mode="sum"` makes the consumer read every byte.
    """
    return handoff_table([nbytes], repeats, mode)[0]


def handoff_table(sizes: Sequence[int], repeats: int = 3, mode: str = "touch") -> list[Handoff]:
    """`handoff_seconds` for several sizes with the same two children (start-up not timed)."""
    if mode not in ("touch", "sum"):
        raise ValueError(f"mode must be 'touch' or 'sum', got {mode!r}")
    positive_int("repeats", repeats)
    for nbytes in sizes:
        positive_int("nbytes", nbytes, minimum=4)
    plain, torchq = default_context(), _ctx()
    queues = {"numpy": (plain.Queue(), plain.Queue()), "torch": (torchq.Queue(), torchq.Queue())}
    children = [
        plain.Process(target=_consume, args=(*queues["numpy"], mode)),
        torchq.Process(target=_consume, args=(*queues["torch"], mode)),
    ]
    results = []
    with running(children, timeout=10):

        def once(kind: str, make: Any) -> float:
            inbox, outbox = queues[kind]
            times = []
            for _ in range(repeats):
                item = make()
                t0 = time.perf_counter()
                inbox.put(item)
                outbox.get(timeout=_WAIT)
                times.append(time.perf_counter() - t0)
                del item
            return sorted(times)[len(times) // 2]

        for _, (inbox, outbox) in queues.items():  # wait until both children run (spawn imports torch)
            inbox.put(np.zeros(1, dtype=np.float32) if inbox is queues["numpy"][0] else torch.zeros(1))
            outbox.get(timeout=_WAIT)
        for nbytes in sizes:
            n = nbytes // 4
            pickled = once("numpy", lambda n=n: np.ones(n, dtype=np.float32))
            fresh = once("torch", lambda n=n: torch.ones(n))
            ready = torch.ones(n).share_memory_()
            shared = once("torch", lambda ready=ready: ready)
            results.append(Handoff(nbytes, pickled, fresh, shared))
            del ready
        for inbox, _ in queues.values():
            inbox.put(None)
    for inbox, outbox in queues.values():
        inbox.close()
        outbox.close()
    queues.clear()  # the nested once() still refers to the dict, so empty it rather than del it
    del inbox, outbox
    gc.collect()  # queues sit in reference cycles; under spawn their semaphores are files in /dev/shm
    return results


# ---- gradients, growing, strategies ----------------------------------------------------------------


def _report_grad(inbox: Any, outbox: Any) -> None:
    torch.set_num_threads(1)
    tensor = inbox.get()
    outbox.put(tensor.grad is None)


def _bump_grads(model: Any, outbox: Any) -> None:
    torch.set_num_threads(1)
    for p in model.parameters():
        if p.grad is not None:
            p.grad.add_(1.0)
        p.data.add_(1.0)
    outbox.put("done")


def grad_after_crossing(start_method: str | None = None) -> dict[str, bool]:
    """What happens to `.grad` when a tensor or a shared model crosses into a child."""
    ctx = _ctx(start_method)
    result: dict[str, bool] = {}
    tensor = torch.ones(3, requires_grad=True)
    tensor.sum().backward()
    inbox, outbox = ctx.SimpleQueue(), ctx.Queue()
    child = ctx.Process(target=_report_grad, args=(inbox, outbox))
    with running([child], timeout=_WAIT):
        inbox.put(tensor)
        result["tensor with a grad arrives with grad None"] = outbox.get(timeout=_WAIT)
    model = torch.nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()  # grads exist before share_memory()
    model.share_memory()
    grad_before = model.weight.grad.clone()
    weight_before = model.weight.detach().clone()
    child = ctx.Process(target=_bump_grads, args=(model, outbox))
    with running([child], timeout=_WAIT):
        outbox.get(timeout=_WAIT)
    result["child's parameter update seen by the parent"] = bool(torch.equal(model.weight, weight_before + 1))
    result["child's grad update seen by the parent"] = bool(torch.equal(model.weight.grad, grad_before + 1))
    del inbox, outbox
    return result


def grow_shared() -> None:
    """Grow a tensor that lives in shared memory: the process dies (run under the watchdog)."""
    torch.zeros(10).share_memory_().resize_(100_000)


def _produce_tensors(queue: Any, count: int, strategy: str | None, done: Any) -> None:
    torch.set_num_threads(1)
    if strategy is not None:
        tmp.set_sharing_strategy(strategy)  # per process: set it where tensors are *sent*
    for i in range(count):
        queue.put(torch.full((4,), float(i)))
    done.wait(_WAIT)


def _lower_fd_limit(headroom: int) -> tuple[int, int]:
    """Allow this process only `headroom` more open files than it has now; return the old limits.

    Relative, because a process forked from a Jupyter kernel starts with dozens of descriptors open.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(fd_count() + headroom, hard), hard))
    return soft, hard


def hold_many_tensors(
    count: int = 200,
    headroom: int = 48,
    strategy: str | None = None,
    keep: Any = "tensor",
    plain: bool = False,
    report: bool = False,
) -> Any:
    """Receive `count` shared tensors in a process allowed only `headroom` more open files, keeping
    every one (or what `keep` returns for it).

    Under `file_descriptor` each received storage holds a file descriptor open while it lives. Run it
    under the watchdog (it changes this process's limits). keep="clone" keeps copies instead; a function
    decides what to keep of each tensor (the exercise). `plain=True` uses the standard library's
    `multiprocessing` queue and process instead of torch's: not a fix, since both pickle tensors alike.
    With `report=True` it returns what was kept, checked against what was sent (a dict: how many items,
    how many are tensors equal to the tensor received, how many are still in shared memory, and the
    types kept), so that a checker can tell keeping the values from keeping something else.
    """
    positive_int("count", count)
    positive_int("headroom", headroom, minimum=16)
    if not callable(keep) and keep not in ("tensor", "clone"):
        raise ValueError(f"keep must be 'tensor', 'clone' or a function tensor -> kept, got {keep!r}")
    if not isinstance(plain, bool):
        raise TypeError(f"plain must be True or False, got {type(plain).__name__}")
    keeper = keep if callable(keep) else (lambda t: t.clone()) if keep == "clone" else (lambda t: t)
    ctx = default_context() if plain else _ctx()
    queue, done = ctx.Queue(), ctx.Event()
    producer = ctx.Process(target=_produce_tensors, args=(queue, count, strategy, done))
    kept = []
    try:
        with running([producer], timeout=5):
            # Only the consumer gets the low limit (a child started later would inherit it).
            soft, hard = _lower_fd_limit(headroom)
            try:
                for _ in range(count):
                    tensor = queue.get(timeout=_WAIT)
                    kept.append(keeper(tensor))
                    del tensor
            except BaseException:
                # The producer would wait forever to flush what we can no longer receive. Kill it, and do
                # not touch `done`: a multiprocessing Event's set() can block on a sleeper that never wakes.
                producer.kill()
                raise
            else:
                done.set()
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    finally:
        if producer.exitcode is not None and producer.exitcode < 0 and strategy != "file_system":
            remove_segments_of(producer.pid)
    if report:
        equal = [
            isinstance(k, torch.Tensor) and k.shape == (4,) and bool((k == float(i)).all()) for i, k in enumerate(kept)
        ]
        return {
            "kept": len(kept),
            "equal tensors": sum(equal),
            "first different": equal.index(False) if False in equal else None,
            "still shared": sum(isinstance(k, torch.Tensor) and k.is_shared() for k in kept),
            "types": sorted({type(k).__name__ for k in kept}),
        }
    return f"kept {len(kept)} tensors"


def remove_segments_of(pid: int | None, folder: str = "/dev/shm") -> list[str]:
    """Remove the shared-memory files that torch named after the dead process `pid`; return their names.

    Under `file_descriptor`, torch creates each segment under a name (`torch_<pid>_<random>_<n>`) and
    unlinks the name at once, keeping only the descriptor. A process killed between the two leaves the
    file in /dev/shm for good (seen once in a test run, when the producer above was killed while still
    sending). Once that process is dead nobody opens the name again: receivers hold descriptors. Not for
    `file_system`, whose names are the segments' only handle while they live."""
    if pid is None or isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"pid must be a positive process id, got {pid!r}")
    if not os.path.isdir(folder):
        return []
    removed = []
    for name in os.listdir(folder):
        if name.startswith(f"torch_{pid}_"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, name))
                removed.append(name)
    return removed


class StrategyDataset(torch.utils.data.Dataset):
    """One item: the sharing strategy of the process that loads it. In a DataLoader worker that is the
    strategy its batches are sent with: the workers are the senders."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> str:
        return tmp.get_sharing_strategy()


def set_file_system(worker_id: int) -> None:
    """worker_init_fn: set the sharing strategy in each worker, the process that sends the batches."""
    tmp.set_sharing_strategy("file_system")


def strategy_in_loader_workers(start_methods: Sequence[str] = ("fork", "spawn")) -> dict[str, str]:
    """Set file_system in this process (run it under the watchdog), then ask a DataLoader worker of each
    start method (that exists here), and a spawn worker whose worker_init_fn sets it."""
    from torch.utils.data import DataLoader

    methods = [m for m in start_methods if m in tmp.get_all_start_methods()]
    if not methods:
        raise ValueError(f"start_methods must name a start method of this platform, got {start_methods!r}")
    tmp.set_sharing_strategy("file_system")
    report = {"this process": tmp.get_sharing_strategy()}
    runs = [(m, None) for m in methods] + [(m, set_file_system) for m in methods if m != "fork"]
    loaders = [
        DataLoader(
            StrategyDataset(),
            batch_size=None,
            num_workers=1,
            multiprocessing_context=tmp.get_context(method),
            worker_init_fn=init,
            timeout=_WAIT,
        )
        for method, init in runs
    ]
    # Every iterator starts its worker at once, so the spawn workers import torch side by side, not in turn
    iterators = [iter(loader) for loader in loaders]
    try:
        for (method, init), iterator in zip(runs, iterators, strict=True):
            report[f"{method} worker" + (", worker_init_fn=set_file_system" if init else "")] = next(iterator)
    finally:
        del iterators  # ends the workers now, not at the next garbage collection
        gc.collect()
    return report


# ---- producer lifetime, buffer reuse, queues ------------------------------------------------------


def produce_one(queue: Any, done: Any | None) -> None:
    """Child: put one tensor on `queue`, then (unless `done` is None) wait until the consumer sets `done`."""
    torch.set_num_threads(1)
    queue.put(torch.arange(4.0))
    if done is not None:
        done.wait(_WAIT)  # stay alive until the consumer has the tensor


def early_exit_producer(wait_for_consumer: bool) -> str:
    """The producer sends one tensor and exits at once (or waits on an Event); then we receive it."""
    ctx = _ctx()
    queue, done = ctx.Queue(), ctx.Event()
    producer = ctx.Process(target=produce_one, args=(queue, done if wait_for_consumer else None))
    with running([producer], timeout=_WAIT):
        if not wait_for_consumer:
            producer.join(_WAIT)  # the producer is gone before we unpickle the tensor
        try:
            tensor = queue.get(timeout=_WAIT)
            result = f"received {tensor.tolist()}"
        except OSError as exc:
            result = _producer_gone(exc)
        finally:
            done.set()
    del queue
    return result


def _producer_gone(exc: OSError) -> str:
    """The receiver could not fetch the descriptor from the sender's socket. Which OSError depends on
    whether the sender's temporary folder (holding the socket) was removed at its exit
    (FileNotFoundError) or outlived it (ConnectionRefusedError), so the course prints the family."""
    return "OSError: the sender has exited, the tensor cannot be fetched"


def _fill_buffers(free: Any, full: Any, count: int, shape: tuple[int, ...], reuse: bool, done: Any) -> None:
    torch.set_num_threads(1)
    for i in range(count):
        buffer = free.get(timeout=_WAIT) if reuse else torch.empty(shape)
        buffer.fill_(float(i))
        full.put(buffer)
        del buffer
    full.put(None)
    done.wait(_WAIT)  # a tensor's sender must outlive its receipt (file_descriptor strategy)


def buffer_reuse(reuse: bool, count: int = 200, shape: tuple[int, ...] = (256, 1024), buffers: int = 4) -> float:
    """Items per second through a producer -> consumer pipeline; with `reuse`, the consumer sends each
    shared buffer back instead of letting the producer allocate (and share) a new one every time."""
    positive_int("count", count)
    positive_int("buffers", buffers)
    ctx = _ctx()
    free, full, done = ctx.Queue(), ctx.Queue(), ctx.Event()
    if reuse:
        for _ in range(buffers):
            free.put(torch.empty(shape).share_memory_())
    producer = ctx.Process(target=_fill_buffers, args=(free, full, count, shape, reuse, done))
    with running([producer], timeout=_WAIT):
        try:
            item = full.get(timeout=_WAIT)  # start-up excluded
            t0 = time.perf_counter()
            received = 1
            while item is not None:
                float(item.view(-1)[0])  # use it
                if reuse:
                    free.put(item)
                del item
                item = full.get(timeout=_WAIT)
                received += item is not None
            seconds = time.perf_counter() - t0
        finally:
            done.set()
    free.close()
    full.close()
    del free, full
    gc.collect()  # queues sit in reference cycles; under spawn their semaphores are files in /dev/shm
    return (received - 1) / seconds


def is_shared_after_put(queue_kind: str, trials: int = 20) -> int:
    """How many of `trials` fresh tensors report `is_shared()` right after `put` (nobody consumes)."""
    positive_int("trials", trials)
    if queue_kind not in ("Queue", "SimpleQueue"):
        raise ValueError(f"queue_kind must be 'Queue' or 'SimpleQueue', got {queue_kind!r}")
    ctx = _ctx()
    queue = getattr(ctx, queue_kind)()
    shared = 0
    for _ in range(trials):
        tensor = torch.zeros(256, 256)
        queue.put(tensor)
        shared += tensor.is_shared()
    for _ in range(trials):
        queue.get()
    if queue_kind == "Queue":
        queue.close()
        queue.join_thread()
    return shared


def _put_one(queue: Any, kind: str, nbytes: int) -> None:
    torch.set_num_threads(1)
    n = nbytes // 4
    queue.put(np.ones(n, dtype=np.float32) if kind == "numpy" else torch.ones(n))


def join_before_drain(kind: str, nbytes: int = 8 * 2**20, drain_first: bool = False) -> str:
    """The child puts one item on a `multiprocessing.Queue`; we join it, then get the item (or the
    other way round with `drain_first`). Run under the watchdog: joining first can hang."""
    if kind not in ("numpy", "tensor"):
        raise ValueError(f"kind must be 'numpy' or 'tensor', got {kind!r}")
    positive_int("nbytes", nbytes, minimum=4)
    ctx = _ctx()
    queue = ctx.Queue()
    child = ctx.Process(target=_put_one, args=(queue, kind, nbytes))
    child.start()
    try:
        if drain_first:
            item = queue.get(timeout=_WAIT)
            child.join(_WAIT)
        else:
            child.join()  # no timeout, on purpose: this is the bug
            try:
                item = queue.get(timeout=_WAIT)
            except OSError as exc:
                return _producer_gone(exc)
        return f"got {type(item).__name__} of {item.nbytes if kind == 'numpy' else item.nbytes} bytes"
    finally:
        if child.is_alive():
            child.kill()
        child.join(5)


# ---- Value, Array, locks, and a shared log ---------------------------------------------------------


def increment(counter: Any, barrier: Any, times: int, use_lock: bool) -> None:
    """Child: wait for the others on `barrier`, then add 1 to `counter` `times` times (under its lock or not)."""
    barrier.wait(_WAIT)
    for _ in range(times):
        if use_lock:
            with counter.get_lock():
                counter.value += 1
        else:
            counter.value += 1  # read, add, write: another process can write in between


def increment_unlocked(counter: Any, barrier: Any, times: int) -> None:
    """Child: wait for the others on `barrier`, then add 1 to `counter` `times` times, without its lock."""
    barrier.wait(_WAIT)
    for _ in range(times):
        counter.value += 1  # read, add, write: another process can write in between


def count_with_value(use_lock: bool, workers: int = 4, times: int = 50_000) -> int:
    """Workers increment one shared `mp.Value` `times` times each, starting together on a Barrier.

    Why so many: a worker does 5,000 increments in a few milliseconds, less than one time slice of the
    scheduler, so on a busy machine the workers often run one after the other and an unlocked count comes
    out exact. 50,000 each, started together, lost updates in 20 runs of 20 on 2 cores with a busy loop on
    each core."""
    positive_int("workers", workers)
    positive_int("times", times)
    ctx = default_context()
    counter = ctx.Value("i", 0)
    barrier = ctx.Barrier(workers)
    procs = [ctx.Process(target=increment, args=(counter, barrier, times, use_lock)) for _ in range(workers)]
    with running(procs, timeout=_WAIT):
        pass
    total = counter.value
    del counter, barrier
    return total


def _train_and_log(rank: int, log: torch.Tensor, steps: int, lr: float) -> None:
    """Fit y = 3x on this worker's own data and write the loss of every step into row `rank` of `log`."""
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 1, generator=g)
    y = 3 * x + 0.1 * torch.randn(256, 1, generator=g)
    w = torch.zeros(1, requires_grad=True)
    for step in range(steps):
        loss = ((x * w - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w -= lr * (1 + rank) * w.grad  # each worker its own learning rate: different curves
            w.grad.zero_()
        log[rank, step] = loss.item()


def shared_loss_log(workers: int = 3, steps: int = 30, lr: float = 0.05) -> torch.Tensor:
    """Start `workers` processes that write their loss per step into one shared (workers x steps) tensor.

    They run backward, so fork, the platform's default, becomes spawn where a forked child's backward
    would fail after one in this process (a CUDA build that sees a GPU: `helpers.hogwild.fork_breaks_autograd`;
    `grad_after_crossing` runs one)."""
    from helpers.hogwild import children_start_method

    positive_int("workers", workers)
    positive_int("steps", steps)
    log = torch.full((workers, steps), float("nan")).share_memory_()
    ctx = _ctx(children_start_method())
    procs = [ctx.Process(target=_train_and_log, args=(rank, log, steps, lr)) for rank in range(workers)]
    with running(procs, timeout=_WAIT):
        pass
    return log.clone()


def fd_count() -> int:
    """File descriptors this process has open (Linux: /proc/self/fd, macOS: /dev/fd)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(folder):
            return len(os.listdir(folder))
    raise RuntimeError("cannot count open file descriptors on this platform")


def pickled_size(obj: Any) -> int:
    """Bytes `obj` takes when pickled the way multiprocessing does (torch tensors: a small handle)."""
    from multiprocessing.reduction import ForkingPickler

    return len(ForkingPickler.dumps(obj, pickle.HIGHEST_PROTOCOL))


def dataloader_keeping_batches(headroom: int = 48, batches: int = 300) -> int:
    """Keep every batch of a 2-worker DataLoader while this process may open only `headroom` more
    files (lowered after the workers started). Run under the watchdog: it changes this process's limits."""
    from torch.utils.data import DataLoader

    from helpers.loading import SleepyDataset

    positive_int("headroom", headroom, minimum=16)
    positive_int("batches", batches)
    loader = DataLoader(SleepyDataset(n=batches, delay=0.0), batch_size=1, num_workers=2)
    iterator = iter(loader)
    kept = [next(iterator)]
    soft, hard = _lower_fd_limit(headroom)
    try:
        kept.extend(iterator)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        del iterator
    return len(kept)


class _Waits:
    """Wraps the queue and the process given to a learner's `collect`, recording every wait: which call,
    with which timeout, and whether a `join` returned with the process still running (it timed out)."""

    def __init__(self, target: Any, name: str) -> None:
        self._target = target
        self._name = name
        self.calls: list[tuple[str, Any, bool]] = []  # (call, timeout, the process still alive afterwards)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self.calls.append((f"{self._name}.get", timeout if block else 0, False))
        return self._target.get(block, timeout)

    def join(self, timeout: float | None = None) -> None:
        self._target.join(timeout)
        self.calls.append((f"{self._name}.join", timeout, self._target.exitcode is None))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def collect_from_producer(collect: Any, nbytes: int = 8 * 2**20) -> str:
    """A child puts one pickled NumPy array of `nbytes` on a Queue; `collect(queue, process)` must return
    it and leave the process joined, with a timeout on every wait. Run under the watchdog (a wrong order
    hangs). The queue and the process are wrapped so that every wait is recorded: the result names any
    wait without a timeout and any `join` that returned before the process had ended."""
    if not callable(collect):
        raise TypeError(f"collect must be a function (queue, process) -> item, got {type(collect).__name__}")
    ctx = default_context()
    queue = ctx.Queue()
    child = ctx.Process(target=_put_one, args=(queue, "numpy", nbytes))
    watched_queue, watched_child = _Waits(queue, "queue"), _Waits(child, "process")
    with running([child], timeout=5):
        item = collect(watched_queue, watched_child)
    calls = watched_queue.calls + watched_child.calls
    if not isinstance(item, np.ndarray) or item.nbytes != nbytes:
        return f"collect returned {type(item).__name__}, not the {nbytes}-byte array"
    if timed_out := [call for call, _, alive in calls if alive]:
        return f"{timed_out[0]}(...) returned after its timeout with the producer still running"
    if untimed := sorted({call for call, timeout, _ in calls if timeout is None}):
        return f"got the array, but without a timeout on: {', '.join(untimed)}"
    if not any(call == "process.join" for call, _, _ in calls):
        return "got the array, but the producer was not joined"
    return "got the array and joined the producer"


def _increment_with(step: Any, counter: Any, barrier: Any, times: int) -> None:
    barrier.wait(_WAIT)
    for _ in range(times):
        step(counter)


def count_with_function(step: Any, workers: int = 4, times: int = 50_000) -> int:
    """Like `count_with_value`, with the increment `step(counter)` written by the learner (needs fork to
    reach the workers)."""
    if not callable(step):
        raise TypeError(f"step must be a function counter -> None, got {type(step).__name__}")
    positive_int("workers", workers)
    positive_int("times", times)
    ctx = mp.get_context("fork")
    counter, barrier = ctx.Value("i", 0), ctx.Barrier(workers)
    procs = [ctx.Process(target=_increment_with, args=(step, counter, barrier, times)) for _ in range(workers)]
    with running(procs, timeout=_WAIT):
        pass
    return counter.value


def _file_system_child(outbox: Any, release: Any, crash: bool) -> None:
    tmp.set_sharing_strategy("file_system")
    tensor = torch.zeros(1000).share_memory_()
    outbox.put(os.getpid())
    if crash:
        time.sleep(0.5)  # let the queue's feeder thread deliver the pid first
        os.kill(os.getpid(), signal.SIGKILL)
    release.wait(_WAIT)
    del tensor


def file_system_lifecycle(crash: bool, wait: float = 10.0) -> dict[str, bool]:
    """A child shares a tensor under `file_system`; is its named file in /dev/shm while the child lives,
    and gone (within `wait` seconds) after it exits normally or is killed (`crash`)?"""
    if not os.path.isdir("/dev/shm"):
        raise RuntimeError("this demo needs /dev/shm (Linux)")
    ctx = _ctx()
    outbox, release = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_file_system_child, args=(outbox, release, crash))
    with running([child], timeout=_WAIT):
        pid = outbox.get(timeout=_WAIT)

        def files() -> list[str]:
            return [name for name in os.listdir("/dev/shm") if name.startswith(f"torch_{pid}_")]

        while_alive = bool(files())
        own_session = _manager_leads_own_session(child.pid)
        release.set()
        child.join(_WAIT)
    deadline = time.monotonic() + wait
    while files() and time.monotonic() < deadline:
        time.sleep(0.1)
    return {
        "a torch_* file in /dev/shm while the child lives": while_alive,
        "torch_shm_manager leads its own session (setsid)": own_session,
        "gone after it ended": not files(),
    }


def _manager_leads_own_session(pid: int) -> bool:
    """Whether the `torch_shm_manager` started by process `pid` called setsid(): its session id is its
    own pid, so signals to our session or process group do not reach it."""
    import psutil

    for proc in psutil.Process(pid).children():
        try:
            if proc.name().startswith("torch_shm_manag"):  # Linux truncates names to 15 characters
                return os.getsid(proc.pid) == proc.pid != os.getsid(0)
        except psutil.Error:
            continue
    return False


def _fill_slot(array: Any, rank: int) -> None:
    array[rank] = rank * 10  # each process writes only its own slot: no lock needed


def fill_array(workers: int = 2) -> list[float]:
    """Each of `workers` processes writes into its own slot of one shared `mp.Array`."""
    positive_int("workers", workers)
    ctx = default_context()
    array = ctx.Array("d", workers)
    procs = [ctx.Process(target=_fill_slot, args=(array, rank)) for rank in range(workers)]
    with running(procs, timeout=_WAIT):
        pass
    return list(array)
