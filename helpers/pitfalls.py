"""Chapter 06, Deadlocks and pitfalls: every hang and mistake of the chapter, small enough to run.

Each pitfall comes as a pair (the wrong version and the fixed one) that the notebook runs under
`helpers.watchdog`, so a hang costs two or three seconds instead of the kernel. Everything that runs in
a child lives here, because spawn children import their target by module and name. Only the standard
library is imported at the top: a spawn child that just waits on a queue should not pay a second for
`import torch`. The process-group pitfalls use their own tiny gloo group (127.0.0.1, a port chosen by
the OS, TCPStore time-outs), so this chapter depends on no other chapter's module.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import multiprocessing as mp
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from helpers.environment import default_context
from helpers.errors import clean, error_line, short_error
from helpers.threads import torch_threads
from helpers.validate import non_negative, positive_int

__all__ = [
    "fork_after_lock",
    "TOKENIZER_SENTENCES",
    "tiny_tokenizer",
    "tokenizers_in_worker",
    "autograd_device_threads",
    "accelerator_device_counts",
    "child_backward_breaks_after_fork",
    "backward_then_fork",
    "square",
    "join_then_get",
    "consume",
    "START_METHOD_TWICE",
    "START_METHOD_AFTER_DATALOADER",
    "run_python",
    "port_taken",
    "loopback_store",
    "port_from_os",
    "interrupted_cell",
    "process_group",
    "SHM_SCRIPT",
    "RECORDED_SHM",
    "shm_exhaustion",
    "stuck_with_faulthandler",
    "stack_names",
    "HANGING_SCRIPT",
    "py_spy_dump",
    "dataloader_timeout",
    "worker_error",
    "optimizer_in_workers",
    "ddp_on_cpu",
    "move_to",
    "softmax_into_cross_entropy",
    "spawn_arguments",
    "takes_rank_and_a",
    "takes_only_a",
    "workers_by_reflex",
    "epoch_draws",
    "seed_words",
    "SCRIPTS",
    "write_script",
    "safe_get_trial",
    "SLOW_SEND",
    "CRASH_AFTER",
    "TRIALS",
]

_WAIT = 30.0  # bound for any get/join that is expected to succeed (a spawn child importing torch is slow)
_BIG = 8_000_000  # bytes: far larger than a pipe's buffer (64 KiB on Linux)


def _fork_or_default() -> Any:
    """The fork context where it exists (demos whose lesson does not depend on the start method, pinned
    to fork because a spawn child pays ~1.5 s to import torch), else the default one."""
    return mp.get_context("fork") if "fork" in mp.get_all_start_methods() else default_context()


# ---- 1. fork after threads -----------------------------------------------------------------------


def _acquire(lock: Any) -> str:
    with lock:
        return "acquired"


def fork_after_lock(held: bool, timeout: float = 2.0) -> Any:
    """Fork a child that takes a lock which another thread of this process `held` at fork time (or had
    released, and ended, before the fork). Returns the watchdog's outcome.

    The child gets the lock's memory in its locked state but not the thread that would release it, so
    with `held=True` it waits forever. Fork only: spawn cannot even pickle a `threading.Lock`.
    """
    from helpers import watchdog

    if not isinstance(held, bool):
        raise TypeError(f"held must be a bool, got {type(held).__name__}")
    if "fork" not in mp.get_all_start_methods():
        raise RuntimeError("fork_after_lock needs the fork start method (Linux or macOS)")
    lock = threading.Lock()
    release, taken = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            if held:
                release.wait(30)

    holder = threading.Thread(target=hold, name="lock-holder")
    holder.start()
    taken.wait(5)
    if not held:
        holder.join(5)  # the fix: no thread is running (or holding anything) when we fork
    try:
        return watchdog.run(_acquire, lock, timeout=timeout, start_method="fork", expect="hang" if held else "return")
    finally:
        release.set()
        holder.join(5)


# ---- 1. another library's thread pool: Hugging Face tokenizers --------------------------------------

TOKENIZER_SENTENCES = (
    "the cat sat on the mat",
    "a dog ran in the park",
    "the bird sang a song",
    "we read a good book",
)


def tiny_tokenizer(sentences: tuple[str, ...] = TOKENIZER_SENTENCES) -> Any:
    """A word-level `tokenizers.Tokenizer` whose vocabulary is the words of `sentences` (plus `[UNK]`),
    built in memory: no download, and no training run (training would use the thread pool itself).
    tokenizers is imported here, not at the top, so that this module stays light."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    if not isinstance(sentences, tuple) or not sentences or not all(isinstance(s, str) for s in sentences):
        raise TypeError("sentences must be a non-empty tuple of str")
    vocab = {"[UNK]": 0}
    for sentence in sentences:
        for word in sentence.split():
            vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    return tokenizer


class _Encoded:
    """A dataset whose every item is one batch encode of its sentences (token counts per sentence):
    `encode_batch` runs on tokenizers' own thread pool when parallelism is on."""

    def __init__(self, tokenizer: Any, sentences: tuple[str, ...], items: int = 2) -> None:
        self.tokenizer = tokenizer
        self.sentences = list(sentences)
        self.items = items

    def __len__(self) -> int:
        return self.items

    def __getitem__(self, i: int) -> list[int]:
        return [len(encoding.ids) for encoding in self.tokenizer.encode_batch(self.sentences)]


def tokenizers_in_worker(
    parallelism: str | None,
    encode_in_parent: bool,
    start_method: str = "fork",
    timeout: float = 3,
) -> str:
    """Batch-encode with a tiny tokenizer in this process (or not), then in one DataLoader worker started
    with `start_method`, with `TOKENIZERS_PARALLELISM` set to `parallelism` (None: unset) for the
    duration of the call. Returns the worker's result or the DataLoader's error line.

    tokenizers registers a fork handler (`pthread_atfork`) that switches parallelism off in a forked
    child once its thread pool has been used, unless the variable is set: with `"true"` the child
    keeps using a pool whose threads fork did not copy, and waits for them forever. `timeout` bounds
    that wait (the DataLoader raises); run it under the watchdog all the same. Fork is the default: the
    start method that hangs.
    """
    from torch.utils.data import DataLoader

    if parallelism is not None and not isinstance(parallelism, str):
        raise TypeError(f"parallelism must be a str or None, got {type(parallelism).__name__}")
    if not isinstance(encode_in_parent, bool):
        raise TypeError(f"encode_in_parent must be a bool, got {type(encode_in_parent).__name__}")
    methods = mp.get_all_start_methods()
    if start_method not in methods:
        raise ValueError(f"start_method must be one of {methods} on this platform, got {start_method!r}")
    if non_negative("timeout", timeout) == 0:
        raise ValueError("timeout must be > 0: the hang needs a bound")
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    _set_env("TOKENIZERS_PARALLELISM", parallelism)
    try:
        tokenizer = tiny_tokenizer()
        if encode_in_parent:
            tokenizer.encode_batch(list(TOKENIZER_SENTENCES))
        loader = DataLoader(
            _Encoded(tokenizer, TOKENIZER_SENTENCES),
            batch_size=None,
            num_workers=1,
            timeout=timeout,
            multiprocessing_context=mp.get_context(start_method),
        )
        it = iter(loader)
        try:
            result = f"worker encoded: {[list(item) for item in it][0]}"
        except RuntimeError as exc:
            result = short_error(exc)
        del it  # ends the worker (a stuck one after DataLoader's 5 s grace), before the variable is restored
        gc.collect()
    finally:
        _set_env("TOKENIZERS_PARALLELISM", before)
    return result


def _set_env(name: str, value: str | None) -> None:
    """Set or (value None) remove an environment variable."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


# ---- 2. importable targets ------------------------------------------------------------------------


def square(x: int) -> int:
    """The same function as the notebook's, defined in a module: spawn children can import it."""
    return x * x


# ---- 4. queues -----------------------------------------------------------------------------------


def _put_bytes(queue: Any, nbytes: int) -> None:
    queue.put(b"x" * nbytes)


def join_then_get(drain_first: bool, nbytes: int = _BIG) -> int:
    """A producer puts `nbytes` on a `multiprocessing.Queue`; the parent joins it, then gets (wrong), or
    gets, then joins (right). Returns the number of bytes received.

    The producer's feeder thread writes the pickled item into a pipe and the producer cannot exit until
    it is all written; with an item larger than the pipe's buffer, that needs a reader. Joining first
    waits for an exit that waits for us: run the wrong order under the watchdog. Pinned to fork where it
    exists (the lesson holds under every start method): the watchdog kills this process on a hang, and a
    forkserver it had started would leave its folder (pymp-*) in the temporary folder.
    """
    if not isinstance(drain_first, bool):
        raise TypeError(f"drain_first must be a bool, got {type(drain_first).__name__}")
    positive_int("nbytes", nbytes)
    ctx = _fork_or_default()
    queue = ctx.Queue()
    producer = ctx.Process(target=_put_bytes, args=(queue, nbytes))
    producer.start()
    if drain_first:
        data = queue.get(timeout=_WAIT)
        producer.join(_WAIT)
    else:
        producer.join()  # no timeout, as in the code this reproduces
        data = queue.get()
    return len(data)


def _produce(queue: Any, fail: bool, safe: bool) -> None:
    """Send three records; with `fail`, die on the second one. `safe` sends what happened, always."""
    try:
        for i in range(3):
            if fail and i == 1:
                raise ValueError(f"bad record {i}")
            queue.put(("item", i))
    except Exception as exc:
        if not safe:
            raise
        queue.put(("error", short_error(exc)))
        return
    if safe:
        queue.put(("done", None))


def consume(fail: bool, safe: bool, timeout: float = 1.0) -> list[Any]:
    """A consumer reading a producer's records. Wrong (`safe=False`): `get()` until three records came,
    with no timeout, so a producer that died early leaves it waiting forever. Right (`safe=True`): the
    producer always ends with a sentinel ("done" or "error"), and every `get` has a timeout after which
    the consumer checks whether the producer is still alive, and, if it is not, gets once more without
    waiting (it may have put its last records just before it exited). Returns what was received. Pinned to fork
    where it exists, as `join_then_get` is (the watchdog kills the wrong version)."""
    for name, value in (("fail", fail), ("safe", safe)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    non_negative("timeout", timeout)
    ctx = _fork_or_default()
    queue = ctx.Queue()
    producer = ctx.Process(target=_produce, args=(queue, fail, safe))
    producer.start()
    got: list[Any] = []
    if not safe:
        while len(got) < 3:
            got.append(queue.get()[1])
        producer.join(_WAIT)
        return got
    import queue as queue_module

    while True:
        try:
            kind, value = queue.get(timeout=timeout)
        except queue_module.Empty:
            if producer.is_alive():
                continue
            try:  # a producer that exited has written all it put: its last records may have come meanwhile
                kind, value = queue.get_nowait()
            except queue_module.Empty:
                got.append(f"producer gone (exit code {producer.exitcode}) without a sentinel")
                break
        if kind != "item":
            if kind == "error":
                got.append(f"producer failed: {value}")
            break
        got.append(value)
    producer.join(_WAIT)
    return got


# ---- 5. set_start_method -------------------------------------------------------------------------

START_METHOD_TWICE = """
import multiprocessing as mp
mp.set_start_method("spawn")   # a notebook cell, first run: fine
mp.set_start_method("spawn")   # the same cell run again
"""

START_METHOD_AFTER_DATALOADER = """
import multiprocessing as mp
import torch
from torch.utils.data import DataLoader

loader = DataLoader(torch.arange(8), batch_size=4, num_workers=1)
print(next(iter(loader)).tolist())      # the workers were started from the default context
try:
    mp.set_start_method("spawn")
except RuntimeError as exc:
    print("RuntimeError:", exc)
ctx = mp.get_context("spawn")           # the fix: a context object, no global state
print("get_context('spawn') still works:", ctx.get_start_method() == "spawn")
"""


def run_python(code: str, timeout: float = 60.0) -> list[str]:
    """Run `code` with `python -c` in a fresh interpreter; return its output lines (stdout, then the
    error line of stderr if any), cleaned. A fresh process because which context is already fixed in
    the kernel depends on what ran before."""
    if not isinstance(code, str) or not code.strip():
        raise TypeError("code must be a non-empty str of Python source")
    non_negative("timeout", timeout)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    lines = [clean(line) for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0:
        lines.append(error_line(done.stderr) or f"exit code {done.returncode}")
    return lines


# ---- 6. process groups ---------------------------------------------------------------------------


def _quiet_port(text: str) -> str:
    return re.sub(r"\b(port:?\s*)\d+", r"\1N", text)


def port_taken(timeout: float = 3.0) -> str:
    """Another program listens on the port we give the process group: rank 0, which hosts the store,
    fails at once. Returns the error line (port number removed). Run it in a child: it imports gloo."""
    import torch.distributed as dist

    non_negative("timeout", timeout)
    with socket.socket() as other:  # "some other program" holding the port
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        try:
            dist.init_process_group(
                "gloo",
                init_method=f"tcp://127.0.0.1:{port}",
                rank=0,
                world_size=1,
                timeout=datetime.timedelta(seconds=timeout),
            )
        except Exception as exc:  # noqa: BLE001 - the error is the result
            return _quiet_port(short_error(exc))
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    return "no error"


def loopback_store(timeout: float = 10.0) -> Any:
    """A one-rank `TCPStore` on a port the OS picks, listening on 127.0.0.1 only.

    We bind the socket to 127.0.0.1 port 0 ourselves (the OS picks a free port: nothing to collide with)
    and hand it to the store (`master_listen_fd`): given only an address, torch's store would listen on
    every interface (notebook 05). Other ranks would connect to 127.0.0.1 and `store.port`.
    """
    import torch.distributed as dist

    non_negative("timeout", timeout)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    port = sock.getsockname()[1]
    wait = datetime.timedelta(seconds=timeout)
    return dist.TCPStore("127.0.0.1", port, 1, True, wait, master_listen_fd=sock.detach())


@contextlib.contextmanager
def process_group(timeout: float = 10.0) -> Iterator[Any]:
    """A one-rank gloo group on a `loopback_store`, destroyed however the block ends, so an interrupted
    cell leaves nothing behind. Yields the store."""
    import torch.distributed as dist

    store = loopback_store(timeout)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=timeout))
    try:
        yield store
    finally:
        dist.destroy_process_group()
        del store


def port_from_os() -> str:
    """The fix for a taken port: let the OS choose it. Returns the result of an all-reduce on one rank."""
    import torch
    import torch.distributed as dist

    with process_group():
        value = torch.ones(1)
        dist.all_reduce(value)
        return f"all_reduce on a group on a port the OS chose: {value.item()}"


def interrupted_cell(cleanup: bool) -> list[str]:
    """Run a "cell" that creates a process group and is interrupted before its last line, twice, as a
    learner pressing Stop and re-running would. Without cleanup the second run finds the first group.
    Returns one line per run. Run it in a child (a group is process-wide state)."""
    import torch.distributed as dist

    if not isinstance(cleanup, bool):
        raise TypeError(f"cleanup must be a bool, got {type(cleanup).__name__}")

    def cell() -> None:
        if cleanup:
            with process_group():
                raise KeyboardInterrupt  # Stop pressed while training
        dist.init_process_group("gloo", store=loopback_store(), rank=0, world_size=1)
        raise KeyboardInterrupt
        dist.destroy_process_group()  # never reached  # noqa: ARG001

    lines = []
    for run in (1, 2):
        try:
            cell()
        except KeyboardInterrupt:
            lines.append(f"run {run}: interrupted; a group is left: {dist.is_initialized()}")
        except Exception as exc:  # noqa: BLE001
            lines.append(f"run {run}: {short_error(exc)}")
    if dist.is_initialized():
        dist.destroy_process_group()
    return lines


# ---- 7. /dev/shm ---------------------------------------------------------------------------------

SHM_SCRIPT = r"""
# Runs inside a private 64 MB tmpfs mounted on /dev/shm (a user and mount namespace of its own).
import json, os, sys
import torch
from torch.utils.data import DataLoader, Dataset

class Samples(Dataset):
    def __len__(self):
        return 40
    def __getitem__(self, i):
        return torch.zeros(1_000_000)               # 4 MB per sample

def leftovers():
    names = [n for n in os.listdir("/dev/shm") if n.startswith("torch_")]
    for name in names:                              # clean up *inside* the private tmpfs
        os.unlink(os.path.join("/dev/shm", name))
    return len(names)

def attempt(batch_size, strategy):
    torch.multiprocessing.set_sharing_strategy(strategy)
    loader = DataLoader(Samples(), batch_size=batch_size, num_workers=1,
                        multiprocessing_context="fork")   # fork: fast start; the lesson is the same
    try:
        shapes = [tuple(b.shape) for b in loader]
        result = f"ok, batches {shapes[0]}"
    except RuntimeError as exc:
        lines = [l.strip() for l in str(exc).splitlines() if l.strip()]
        result = next((l for l in lines if "shared memory" in l), lines[-1])
    return {"result": result, "torch_files_left": leftovers()}

report = {"shm_mb": os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize // 2**20,
          "batch 20 (80 MB), file_descriptor": attempt(20, "file_descriptor"),
          "batch 4 (16 MB), file_descriptor": attempt(4, "file_descriptor"),
          "batch 20 (80 MB), file_system": attempt(20, "file_system")}
print(json.dumps(report))
"""

# What shm_exhaustion returned on the machine the notebook was written on (Linux, torch 2.13.0), shown
# where user namespaces are blocked.
RECORDED_SHM = {
    "shm_mb": 64,
    "batch 20 (80 MB), file_descriptor": {
        "result": "RuntimeError: unable to allocate shared memory(shm) for file </torch_N_…>: No space left on "
        "device (28)",
        "torch_files_left": 1,
    },
}


def shm_exhaustion(timeout: float = 60.0) -> dict[str, Any] | None:
    """Run `SHM_SCRIPT` in a private 64 MB /dev/shm (`unshare -Urm`, then a tmpfs mount); None where the
    platform does not allow it (no `unshare`, user namespaces blocked). Nothing touches the real /dev/shm:
    the private tmpfs vanishes with the namespace, and the script removes its leftovers before that."""
    non_negative("timeout", timeout)
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return None
    shell = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" -c "$1"'
    try:
        done = subprocess.run(
            [unshare, "-Urm", "sh", "-c", shell, sys.executable, SHM_SCRIPT],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or not done.stdout.strip():
        return None
    report = json.loads(done.stdout.strip().splitlines()[-1])
    for value in report.values():
        if isinstance(value, dict):
            value["result"] = re.sub(r"torch_\d+_\w+", "torch_N_…", clean(value["result"]))
    return report


# ---- 8. accelerators and fork: autograd's device threads --------------------------------------------


def autograd_device_threads(device_counts: Mapping[str, int]) -> int:
    """How many device threads autograd's engine starts at the first backward of a process, given how many
    devices each registered device backend sees (`{"cuda": 2}`, `{"mps": 1}`, `{}`).

    This mirrors `Engine::start_device_threads` (torch/csrc/autograd/engine.cpp), which every backward
    calls once per process, whatever the tensors' device: the largest device count among the non-CPU
    backends (devices of different types share threads), and when that is 0 it returns before anything
    else. When it is above 0 it first calls `track_bad_autograd_forks()`, the `pthread_atfork` handler
    that makes every backward of a child forked later raise "Unable to handle autograd's threading in
    combination with fork-based multiprocessing". So a result above 0 means: after any backward in this
    process, CPU tensors too, a forked child cannot run backward. Pure logic, so it can be tested on a
    machine without a GPU. CPU, meta and lazy tensors do not count: their backward runs in the thread that
    called it (`should_run_in_cpu_ready_queue` in engine.cpp).
    """
    if not isinstance(device_counts, Mapping):
        raise TypeError(f"device_counts must be a mapping of device type to count, got {type(device_counts).__name__}")
    counts = []
    for kind, count in device_counts.items():
        if not isinstance(kind, str):
            raise TypeError(f"device_counts' keys must be device types (str), got {kind!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"device_counts[{kind!r}] must be an int >= 0, got {count!r}")
        if kind not in ("cpu", "meta", "lazy"):  # their backward runs in the calling thread: no device thread
            counts.append(count)
    return max(counts, default=0)


def accelerator_device_counts() -> dict[str, int]:
    """The accelerator this torch was built with and how many of its devices are visible (`{}` for a CPU
    build), asked in a way that does not initialise CUDA: `torch.accelerator.device_count()` asks NVML
    first on CUDA, so it does not poison a later fork, as `torch.cuda.is_available()` would. An empty
    `CUDA_VISIBLE_DEVICES`, set before torch first touches CUDA, makes a CUDA build's count 0 (it does not
    hide another backend's devices, such as MPS)."""
    import torch

    accelerator = torch.accelerator.current_accelerator()
    return {} if accelerator is None else {accelerator.type: torch.accelerator.device_count()}


def child_backward_breaks_after_fork() -> bool:
    """True when, in this torch on this machine, a backward in a process (on any tensors) breaks the
    backward of the children it forks afterwards: a CUDA build on a machine with a GPU, MPS on Apple
    silicon, any accelerator with a device. False for a CPU build; `CUDA_VISIBLE_DEVICES=""` makes it False on a
    CUDA machine only (it hides CUDA devices, not MPS)."""
    return autograd_device_threads(accelerator_device_counts()) > 0


def _autograd_context() -> Any:
    """A context for children that run backward: fork where it is safe here (fast start), spawn where a
    backward already run in this process would break a forked child's (see
    `child_backward_breaks_after_fork`)."""
    return mp.get_context("spawn") if child_backward_breaks_after_fork() else _fork_or_default()


def _os_threads() -> int | None:
    """The number of OS threads of this process (Linux's /proc), None where that cannot be read."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _backward() -> list[float]:
    """One small backward pass, on CPU tensors; returns the gradient."""
    import torch

    weight = torch.ones(3, requires_grad=True)
    (weight * torch.arange(3.0)).sum().backward()
    return weight.grad.tolist()


def _backward_in_child(results: Any) -> None:
    import torch

    torch.set_num_threads(1)  # a forked child, before its first op (section 1)
    try:
        results.put(("returned", _backward()))
    except RuntimeError as exc:  # what a child gets after any backward in its parent, when a device is seen
        results.put(("raised", short_error(exc)))


def backward_then_fork(backward_in_parent: bool = True) -> dict[str, Any]:
    """Run a backward pass on CPU tensors in this process (or not), then fork a child that runs one too.
    Returns how many device threads the engine's rule predicts here (`autograd_device_threads`), what
    each side got, and whether this process's backward started any OS thread. Fork only: the error this
    probes belongs to fork.

    With a CPU build (or no visible device) the engine starts no thread and tracks nothing, and the child's
    backward works. With a CUDA build on a machine with a GPU, or MPS on Apple silicon, the parent's CPU
    backward starts the device threads and arms the fork handler, and the child's backward raises: the
    result says so rather than failing. Run it under the watchdog (it forks, and torch must be
    single-threaded in a forked child of the kernel).
    """

    if not isinstance(backward_in_parent, bool):
        raise TypeError(f"backward_in_parent must be a bool, got {type(backward_in_parent).__name__}")
    if "fork" not in mp.get_all_start_methods():
        raise RuntimeError("backward_then_fork needs the fork start method (Linux or macOS)")
    predicted = autograd_device_threads(accelerator_device_counts())
    with torch_threads(1):  # so that no OpenMP thread is counted as the engine's
        threads_before = _os_threads()
        parent = _backward() if backward_in_parent else None
        threads_after = _os_threads()
    ctx = mp.get_context("fork")
    results = ctx.SimpleQueue()
    child = ctx.Process(target=_backward_in_child, args=(results,))
    child.start()
    child.join(_WAIT)
    if child.is_alive():
        child.kill()
        child.join(5)
        got: Any = ("hung", None)
    else:
        got = results.get() if not results.empty() else ("died", child.exitcode)
    results.close()
    return {
        "device threads the engine starts here": predicted,
        "parent's backward (CPU tensors)": parent,
        "threads started by the parent's backward": (
            None if threads_before is None or threads_after is None else threads_after - threads_before
        ),
        "forked child's backward": f"{got[0]} {got[1]}",
    }


# ---- 9. debugging kit ----------------------------------------------------------------------------


def stuck_with_faulthandler(trace_path: str, after: float = 1.0) -> None:
    """Arm `faulthandler.dump_traceback_later` to write every thread's stack to `trace_path` after
    `after` seconds, then get stuck (the dead-producer consumer). The file is the diagnosis even when
    nothing else can look inside the process."""
    import faulthandler

    non_negative("after", after)
    trace = open(trace_path, "w")  # noqa: SIM115 - must stay open until faulthandler writes
    faulthandler.dump_traceback_later(after, file=trace)
    consume(fail=True, safe=False)


def stack_names(trace: str, start: str) -> list[str]:
    """Function names of the main thread in a faulthandler dump, from `start` inward (outer frames differ
    between fork and spawn), innermost last."""
    if not isinstance(trace, str) or not isinstance(start, str):
        raise TypeError("trace and start must be str")
    names: list[str] = []
    for line in trace.splitlines():
        if line.startswith(("Thread ", "Current thread")) and names:
            break  # the main thread comes first in faulthandler's dump of the calling thread's process
        match = re.match(r'^\s+File ".*", line \d+ in (.+)$', line)
        if match:
            names.append(match.group(1))
    names.reverse()  # faulthandler lists the most recent call first
    return names[names.index(start) :] if start in names else names


HANGING_SCRIPT = """
import multiprocessing as mp

def wait_for_results(queue):
    return queue.get()          # the producer never sends anything

if __name__ == "__main__":
    wait_for_results(mp.get_context().Queue())
"""


def py_spy_dump(folder: str | os.PathLike[str], wait: float = 1.0) -> str:
    """Start `HANGING_SCRIPT` as a separate process, let it get stuck, and return what `py-spy dump
    --pid` says about it (or why it could not attach). The process is killed before returning."""
    non_negative("wait", wait)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return "py-spy is not installed (pip install py-spy)"
    script = Path(folder, "hanging.py")
    script.write_text(HANGING_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(wait)
        done = subprocess.run([spy, "dump", "--pid", str(proc.pid)], capture_output=True, text=True, timeout=20)
        ansi = re.compile(r"\x1b\[[0-9;]*m")  # py-spy colours its report even into a pipe
        text = ansi.sub("", done.stdout if done.returncode == 0 else done.stderr).strip()
        return text if done.returncode == 0 else f"py-spy could not attach: {text}"
    finally:
        proc.kill()
        proc.wait(5)


class _Slow:
    """A dataset whose third item takes `delay` seconds (a stalled network read)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        if i == 2:
            time.sleep(self.delay)
        return i


def dataloader_timeout(timeout: float, delay: float = 1.5) -> str:
    """Iterate a DataLoader with one worker whose third item stalls for `delay` s; `timeout` > 0 turns
    the stall into an error. Returns the items or the error line. The iterator is deleted inside, so its
    worker ends here (a kept exception would keep it alive). Pinned to fork: a spawn worker's start-up
    alone can exceed a one-second timeout."""
    from torch.utils.data import DataLoader

    non_negative("timeout", timeout)
    non_negative("delay", delay)
    loader = DataLoader(
        _Slow(delay), batch_size=1, num_workers=1, timeout=timeout, multiprocessing_context=_fork_or_default()
    )
    it = iter(loader)
    got = []
    try:
        for batch in it:
            got.append(int(batch))
        result = f"items {got}"
    except RuntimeError as exc:
        result = f"after items {got}: {short_error(exc)}"
    del it
    gc.collect()
    return result


class _Broken:
    """A dataset with a bug at index 3."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> int:
        return {0: 0, 1: 1, 2: 2}[i % 4]


def worker_error(num_workers: int) -> dict[str, str]:
    """Iterate a DataLoader over `_Broken` and catch the error: its first line and the innermost frame
    of the traceback the parent sees. With workers the frame is torch's re-raise; with 0 it is the bug."""
    import traceback

    from torch.utils.data import DataLoader

    positive_int("num_workers", num_workers, minimum=0)
    ctx = _fork_or_default() if num_workers else None
    loader = DataLoader(_Broken(), batch_size=2, num_workers=num_workers, multiprocessing_context=ctx)
    it = iter(loader)
    result = {"error": "none", "innermost frame": ""}
    try:
        for _ in it:
            pass
    except Exception as exc:  # noqa: BLE001
        frames = traceback.extract_tb(exc.__traceback__)
        result = {"error": short_error(exc), "innermost frame": frames[-1].name}
        # torch's re-raise leaves a reference cycle (frame -> exception -> traceback -> frame) that keeps
        # the iterator alive past `del`; collected later, its worker is only killed after 5 s
        traceback.clear_frames(exc.__traceback__)
    del it
    gc.collect()
    return result


# ---- 10. mistakes from tutorials -----------------------------------------------------------------


@contextlib.contextmanager
def _no_empty_inductor_cache_left() -> Iterator[None]:
    """`optimizer.step()` imports torch._dynamo, which creates torch's compile cache folder
    (`torchinductor_<user>` in the temporary folder) even when nothing is compiled. Remove it afterwards if
    it is new and still empty, so a demo leaves nothing in the temporary folder; a folder that holds
    anything, or existed before, is left alone."""
    import getpass
    import tempfile

    folder = Path(
        os.environ.get("TORCHINDUCTOR_CACHE_DIR") or Path(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
    )
    existed = folder.exists()
    try:
        yield
    finally:
        if not existed:
            with contextlib.suppress(OSError):  # not empty, or already gone: leave it
                folder.rmdir()


def _steps(rank: int, model: Any, optimizer: Any, build_own: bool) -> None:
    import torch

    torch.set_num_threads(1)
    if build_own:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.manual_seed(rank)
    for _ in range(5):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()


def optimizer_in_workers(build_in: str) -> dict[str, bool]:
    """Two workers train a shared model with SGD with momentum. The optimizer is built in the parent and
    passed to them (`build_in="parent"`, as some tutorials do, believing that shares it), built by each
    worker ("worker": says what really happens), or built in the parent with its momentum buffers created
    there and moved to shared memory before the workers start ("shared": what sharing the state takes, as in
    notebook 03's exercise). Only "shared" gives the parent's optimizer the workers' momentum: otherwise
    each worker creates its buffers lazily, privately, at its first step. Fork where that is safe (fast
    start), else spawn (`_autograd_context`: the workers run backward); under spawn the optimizer is
    pickled, with the same result."""
    import torch

    if build_in not in ("parent", "worker", "shared"):
        raise ValueError(f"build_in must be 'parent', 'worker' or 'shared', got {build_in!r}")
    with _no_empty_inductor_cache_left():  # building an optimizer imports torch._dynamo
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        model.share_memory()
        before = model.weight.detach().clone()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if build_in == "shared":  # create the state now, in shared memory; step() then updates it in place
            for param in model.parameters():
                optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param).share_memory_()
        ctx = _autograd_context()
        from helpers.processes import running

        procs = [ctx.Process(target=_steps, args=(r, model, optimizer, build_in == "worker")) for r in range(2)]
        with running(procs, timeout=_WAIT):
            pass
        momentum = [state.get("momentum_buffer") for state in optimizer.state.values()]
        return {
            "workers finished": all(p.exitcode == 0 for p in procs),
            "shared weights changed": not torch.equal(before, model.weight.detach()),
            "parent's optimizer sees the workers' momentum": any(
                m is not None and bool(m.abs().sum() > 0) for m in momentum
            ),
        }


def ddp_on_cpu(device_ids: list[int] | None) -> str:
    """Wrap a model in DDP on a one-rank gloo group with `device_ids` (a GPU-only argument) or without;
    returns the error line or "wrapped". Run it in a child (it makes a process group)."""
    import torch

    if device_ids is not None and not isinstance(device_ids, list):
        raise TypeError(f"device_ids must be a list or None, got {type(device_ids).__name__}")
    with _no_empty_inductor_cache_left(), process_group():  # importing DDP imports torch._dynamo
        from torch.nn.parallel import DistributedDataParallel

        try:
            model = DistributedDataParallel(torch.nn.Linear(2, 2), device_ids=device_ids)
            return f"wrapped; parameters on {next(model.parameters()).device}"
        except Exception as exc:  # noqa: BLE001
            return short_error(exc)


def move_to(device: Any) -> str:
    """Move a small model to `device` (an int such as a rank, a str or a `torch.device`) and return where
    its weights are, or the error line. Run it in a child: on a machine with a GPU the move initialises
    CUDA, and chapter 06's kernel keeps CUDA uninitialised because it forks again later (section 8)."""
    import torch

    if isinstance(device, bool) or not isinstance(device, int | str | torch.device):
        raise TypeError(f"device must be an int, a str or a torch.device, got {type(device).__name__}")
    try:
        return f"on {torch.nn.Linear(2, 2).to(device).weight.device.type}"
    except RuntimeError as exc:
        return short_error(exc)


def softmax_into_cross_entropy(steps: int = 100) -> dict[str, float]:
    """Train the same seeded classifier twice: `CrossEntropyLoss` on logits (right) and on softmax
    outputs (wrong: the loss applies log-softmax itself). Returns final losses and accuracies (%)."""
    import torch

    positive_int("steps", steps)
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(5, 10, generator=g) * 1.5
    y = torch.randint(0, 5, (1000,), generator=g)
    x = centres[y] + torch.randn(1000, 10, generator=g)
    result: dict[str, float] = {}
    with _no_empty_inductor_cache_left():
        for name in ("logits", "softmax"):
            result.update(_train_classifier(name, x, y, steps))
    return result


def _train_classifier(name: str, x: Any, y: Any, steps: int) -> dict[str, float]:
    """One run of `softmax_into_cross_entropy`: "logits" (right) or "softmax" (wrong) into the loss."""
    import torch

    result: dict[str, float] = {}
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(steps):
        out = model(x)
        loss = loss_fn(out.softmax(dim=1) if name == "softmax" else out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        result[f"{name}: loss"] = round(loss.item(), 2)
        result[f"{name}: accuracy %"] = round((model(x).argmax(1) == y).float().mean().item() * 100, 1)
    return result


def takes_only_a(a: int) -> None:
    """A spawn target written as the tutorial wrote it: forgets that rank comes first."""


def takes_rank_and_a(rank: int, a: int, out: Any) -> None:
    """A spawn target as `torch.multiprocessing.spawn` calls it: fn(rank, *args)."""
    out[rank] = a * 10 + rank


def spawn_arguments(fn: Callable[..., Any], nprocs: int = 2, timeout: float = _WAIT) -> str:
    """Start `fn` the way `torch.multiprocessing.spawn(fn, args=(3, out), nprocs)` does (same API,
    `start_processes`, pinned to fork to start fast) and return what came back."""
    import torch
    import torch.multiprocessing as tmp

    from helpers.processes import join_spawned, quiet_spawn_log, remove_error_files

    positive_int("nprocs", nprocs)
    out = torch.zeros(nprocs, dtype=torch.int64).share_memory_()
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    args = (3,) if fn is takes_only_a else (3, out)
    with quiet_spawn_log():
        context = tmp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method=method)
        try:
            join_spawned(context, timeout)
        except tmp.ProcessRaisedException as exc:
            return short_error(exc, line="last")
        finally:
            remove_error_files(context)  # the failing rank's pytorch-errorfile-*.pickle in the temporary folder
    return f"results by rank: {out.tolist()}"


def workers_by_reflex(ranks: int = 2) -> dict[str, Any]:
    """What `num_workers=os.cpu_count()` means when this process may use fewer cores than the machine
    has (a container's CPU limit, simulated in a child with `sched_setaffinity` to one core) and
    several ranks each start that many workers. Run it in a child: it changes its own CPU affinity."""
    from torch.utils.data import DataLoader

    from helpers.environment import pinnable_cores, usable_cores

    positive_int("ranks", ranks)
    pinnable = pinnable_cores()
    if pinnable:
        os.sched_setaffinity(0, {pinnable[0]})
    cores = usable_cores()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = DataLoader(list(range(8)), num_workers=os.cpu_count() or 1, multiprocessing_context=_fork_or_default())
        it = iter(loader)
        next(it)
        del it
    gc.collect()
    messages = [str(w.message) for w in caught if "worker" in str(w.message)]
    wanted = max(0, cores // ranks - 1)
    return {
        "cores this process may use": cores,
        "os.cpu_count() is larger": (os.cpu_count() or 1) > cores,
        "DataLoader warned about too many workers": bool(messages),
        f"processes on {cores} core(s) with {ranks} ranks": ranks * (1 + (os.cpu_count() or 1)),
        "right: num_workers per rank": wanted,
    }


_word_read: int | None = None  # in a worker: the state word `_seed_from_global_state` read


def _seed_from_global_state(worker_id: int) -> None:
    """The tutorial's worker_init_fn: seeds NumPy from word 0 of the worker's global NumPy state.

    That word is the same in every worker, every epoch and every run: before `worker_init_fn` runs, the
    DataLoader's worker loop has already seeded NumPy, with an array (`np.random.seed(_generate_state(
    base_seed, worker_id))` in torch/utils/data/_utils/worker.py), and seeding NumPy's Mersenne Twister
    from an array always sets word 0 of its state to 0x80000000. So worker i is seeded with
    0x80000000 + i, again each epoch. (The word it reads is kept in `_word_read` for `seed_words`.)"""
    import numpy as np

    global _word_read
    _word_read = int(np.random.get_state()[1][0])
    np.random.seed((_word_read + worker_id) % 2**32)


class _WordRead:
    """Each item is the state word the tutorial's worker_init_fn read in the worker that loads it."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> int:
        return -1 if _word_read is None else _word_read


def seed_words(epochs: int = 2) -> list[list[str]]:
    """The word of NumPy's state that the tutorial's worker_init_fn reads, per epoch and worker (2 fork
    workers, one item each), in hex: the same in every cell of the table (see `_seed_from_global_state`)."""
    from torch.utils.data import DataLoader

    positive_int("epochs", epochs)
    loader = DataLoader(
        _WordRead(),
        batch_size=1,
        num_workers=2,
        worker_init_fn=_seed_from_global_state,
        multiprocessing_context=_fork_or_default(),
    )
    return [[hex(int(batch)) for batch in loader] for _ in range(epochs)]


class _Noise:
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> float:
        import numpy as np

        return float(np.random.rand())


def epoch_draws(wrong_init: bool, epochs: int = 2) -> list[list[float]]:
    """The "random" augmentation values each epoch sees, with 2 fork workers (fast start; the lesson is
    the same under spawn), with the tutorial's `worker_init_fn` or with none (torch then reseeds NumPy in
    every worker from a seed that changes every epoch)."""
    import torch
    from torch.utils.data import DataLoader

    positive_int("epochs", epochs)
    torch.manual_seed(0)
    loader = DataLoader(
        _Noise(),
        batch_size=2,
        num_workers=2,
        worker_init_fn=_seed_from_global_state if wrong_init else None,
        multiprocessing_context=_fork_or_default(),
    )
    return [[round(v, 4) for batch in loader for v in batch.tolist()] for _ in range(epochs)]


# ---- exercises -----------------------------------------------------------------------------------

SCRIPTS = {
    "process_no_guard": """
import multiprocessing as mp

def work():
    pass

p = mp.get_context("spawn").Process(target=work)   # no `if __name__ == "__main__":`
p.start()
p.join()
print("child exit code:", p.exitcode)
""",
    "mystery": """
import multiprocessing as mp

def make_features(queue):
    queue.put([float(i) for i in range(1_000_000)])   # about 9 MB once pickled

if __name__ == "__main__":
    ctx = mp.get_context()
    queue = ctx.Queue()
    worker = ctx.Process(target=make_features, args=(queue,))
    worker.start()
    worker.join()
    features = queue.get()
    print("features:", len(features))
""",
    "pool_no_guard": """
import multiprocessing as mp

def square(x):
    return x * x

pool = mp.get_context("spawn").Pool(2)       # no `if __name__ == "__main__":`
print("results:", pool.map(square, range(4)))
pool.close()
""",
    "pool_guarded": """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        print("results:", pool.map(square, range(4)))
""",
}


def write_script(name: str, folder: str | os.PathLike[str]) -> Path:
    """Write one of `SCRIPTS` to `folder/<name>.py` and return its path."""
    if name not in SCRIPTS:
        raise ValueError(f"name must be one of {sorted(SCRIPTS)}, got {name!r}")
    if not Path(folder).is_dir():
        raise ValueError(f"folder must be an existing directory, got {str(folder)!r}")
    path = Path(folder, f"{name}.py")
    path.write_text(SCRIPTS[name].lstrip())
    return path


SLOW_SEND = 3.0  # s: the living producer sends after this; six of the consumer's timeouts
CRASH_AFTER = 0.5  # s: the failing producer crashes after this, having sent nothing
TRIALS = ("slow", "crash", "sent_then_exited")


def _send_later(queue: Any, trial: str, crashed_at: Any, done: Any) -> None:
    if trial == "crash":
        time.sleep(CRASH_AFTER)  # slower than one timeout: giving up after one is wrong
        crashed_at.value = time.monotonic()  # the machine's monotonic clock: the parent reads the same one
        raise ValueError("producer crashed")
    if trial == "slow":
        time.sleep(SLOW_SEND)
        queue.put("payload")
        done.wait(_WAIT)  # alive until the call returns: this trial is about waiting, not about the exit
        return
    queue.put("payload")  # sent_then_exited: at once; the feeder thread writes it before the process ends


class _TimedOutJustBefore:
    """The queue of the `sent_then_exited` trial: its first get with a timeout waits until the producer has
    exited, then raises queue.Empty, as a get whose timeout fires a moment before the item arrives does
    (under load that moment can last long enough for the producer to exit). Everything else is the real
    queue's, so `get_nowait()`, `empty()` and a second `get` see the item."""

    def __init__(self, queue: Any, producer: Any) -> None:
        self._queue, self._producer, self._fired = queue, producer, False

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block and timeout is not None and not self._fired:
            import queue as queue_module

            self._fired = True
            self._producer.join(_WAIT)
            raise queue_module.Empty
        return self._queue.get(block, timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def safe_get_trial(fn: Callable[..., Any], trial: str, timeout: float = 0.5) -> dict[str, Any]:
    """Call `fn(queue, producer, timeout)` against one producer of `TRIALS`: "slow" sends one item after
    `SLOW_SEND` s and stays alive until the call returns; "crash" dies after `CRASH_AFTER` s having sent
    nothing; "sent_then_exited" sends at once and exits while `fn`'s first timed get is made to time out
    (see `_TimedOutJustBefore`). Returns {"result": "returned <value>" or "raised <error line>", "after
    crash": seconds from the crash to the end of the call (None without a crash)}, so a checker can see
    how soon a dead producer was noticed. Run it under the watchdog: a wrong `fn` hangs. Pinned to fork:
    `fn` may be a notebook function."""
    if not callable(fn):
        raise TypeError(f"fn must be a function (queue, producer, timeout) -> item, got {type(fn).__name__}")
    if trial not in TRIALS:
        raise ValueError(f"trial must be one of {TRIALS}, got {trial!r}")
    ctx = _fork_or_default()
    queue, crashed_at, done = ctx.Queue(), ctx.Value("d", 0.0), ctx.Event()
    producer = ctx.Process(target=_send_later, args=(queue, trial, crashed_at, done))
    producer.start()
    given = _TimedOutJustBefore(queue, producer) if trial == "sent_then_exited" else queue
    try:
        result = f"returned {fn(given, producer, timeout)!r}"
    except Exception as exc:  # noqa: BLE001 - the learner's function may raise anything
        result = f"raised {short_error(exc)}"
    ended = time.monotonic()
    done.set()
    producer.join(_WAIT)
    after = round(ended - crashed_at.value, 2) if crashed_at.value else None
    return {"result": result, "after crash": after}
