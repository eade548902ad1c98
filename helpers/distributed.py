"""Chapter 05, torch.distributed and DDP on CPU: the functions its ranks run (the demos of every
section), a ring all-reduce written by hand, DDP checks, the sampler, the chapter's torchrun jobs, its
failure demos and the timings of section 10 and of two bench figures (`ddp_speedup`, `ring_allreduce`).

The ranks are started by `helpers.launcher` (loopback only: a store bound to 127.0.0.1, gloo pinned to
`lo`, torchrun in a private network namespace where Linux allows it). Every demo here is a module-level
function `fn(rank, world_size, **kw)`, so spawn and forkserver children can import it by name.

Conventions as in the other chapters: ranks never print, they return results (the launcher writes them
to a file per rank and the parent prints them sorted by rank); every wait has a timeout; every process
group is destroyed, every listener closed and every process joined before a function returns.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.environment import default_start_method, pinned
from helpers.errors import clean, short_error
from helpers.launcher import (
    LOOPBACK,
    check_rank,
    describe_error,
    free_port,
    isolated,
    launch,
    listening_addresses,
    torchrun_standalone,
    torchrun_two_nodes,
)
from helpers.timing import Load, Spread, measure_load, probe_fastest_core, spread
from helpers.validate import positive_int

__all__ = [
    "SCRIPT",
    "hello",
    "point_to_point",
    "isend_race",
    "collectives",
    "ring_check",
    "ddp_check",
    "checkpoint",
    "ring_allreduce",
    "ring_bytes_per_rank",
    "naive_bytes_per_rank",
    "make_model",
    "make_batch",
    "ddp_gradients",
    "sampler_indices",
    "epoch_orders",
    "first_group",
    "read_ranks",
    "default_store_probe",
    "two_node_commands",
    "torchrun_job",
    "torchrun_all",
    "TrainRun",
    "timed_training",
    "timed_shapes",
    "ddp_throughput",
    "timed_side_by_side",
    "weak_scaling",
    "WeakScaling",
    "ddp_throughputs",
    "which_wins",
    "ring_timing",
    "ring_vs_allreduce",
    "ring_times",
    "ring_reading",
    "uneven_rank",
    "uneven",
    "first_error_after",
    "watch_hang",
    "mismatch_rank",
    "mismatch",
    "foreign_listener_client",
    "store_host_on_taken_port",
    "clean_line",
]

SCRIPT = Path(__file__).resolve().parent / "scripts" / "ddp_train.py"


# ---------------------------------------------------------------------------------------------- demos
def first_group(rank: int, world_size: int, folder: str) -> None:
    """The whole life of a process group, bare, as the notebook's first launch runs it: meet through a
    file in `folder` (`file://`: nothing listens for the rendezvous), all-reduce one number, write what
    this rank saw to `folder/rank<r>.json` (ranks do not print), leave the group."""

    torch.set_num_threads(1)  # first: a forked child of a kernel would hang in OpenMP otherwise
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's own connections on loopback
    dist.init_process_group(
        "gloo",
        init_method=f"file://{os.path.join(folder, 'rendezvous')}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=30),
    )
    try:
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)  # every rank ends with the sum over all ranks
        seen = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "sum of rank+1": t.item()}
    finally:
        dist.destroy_process_group()
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as f:
        json.dump(seen, f)


def read_ranks(folder: str) -> list[dict[str, Any]]:
    """What each rank of `first_group` wrote, sorted by rank."""
    rows = [json.loads(p.read_text()) for p in Path(folder).glob("rank*.json")]
    return sorted(rows, key=lambda row: row["rank"])


def hello(rank: int, world_size: int) -> dict[str, Any]:

    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "initialized": dist.is_initialized(),
        "listens on": listening_addresses(tree=False),  # the store (rank 0) and gloo, while the group is alive
    }


def point_to_point(rank: int, world_size: int) -> dict[str, Any]:
    """Rank 0 sends to rank 1, blocking (`send`/`recv`) and non-blocking (`isend`/`irecv` + `wait`)."""

    out: dict[str, Any] = {}
    if rank == 0:
        dist.send(torch.tensor([1.0, 2.0, 3.0]), dst=1)
        work = dist.isend(torch.tensor([10.0, 20.0]), dst=1)
        work.wait()  # the buffer may be reused only after this
    elif rank == 1:
        got = torch.zeros(3)
        dist.recv(got, src=0)
        out["recv"] = got.tolist()
        buffer = torch.zeros(2)
        work = dist.irecv(buffer, src=0)
        out["irecv before wait"] = "not safe to read"
        work.wait()
        out["irecv after wait"] = buffer.tolist()
    return out


def isend_race(rank: int, world_size: int, rounds: int = 20, size: int = 250_000) -> list[str]:
    """Rank 0 overwrites the buffer of an `isend` right away, without waiting: what arrives at rank 1
    is the old data, the new data or a mix, depending on how far the send had got."""

    seen = []
    for _ in range(rounds):
        if rank == 0:
            buffer = torch.zeros(size)
            work = dist.isend(buffer, dst=1)
            buffer.fill_(1.0)  # the mistake: touching the buffer before work.wait()
            work.wait()
        elif rank == 1:
            got = torch.empty(size)
            dist.recv(got, src=0)
            ones = int(got.sum().item())
            seen.append("old (zeros)" if ones == 0 else "new (ones)" if ones == size else "mixed")
        dist.barrier()
    return seen


def collectives(rank: int, world_size: int) -> dict[str, Any]:
    """Every collective once on small tensors; each rank returns what it holds afterwards."""

    out: dict[str, Any] = {}
    t = torch.tensor([0.0, 0.0]) if rank else torch.tensor([7.0, 8.0])
    dist.broadcast(t, src=0)
    out["broadcast from 0"] = t.tolist()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    out["all_reduce SUM of rank+1"] = t.tolist()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    out["all_reduce AVG of rank+1"] = t.tolist()
    t = torch.tensor([rank + 1])  # an integer tensor: AVG would have to round
    # On a group of its own, used for nothing else: a gloo barrier first waits for the collectives of
    # its group that are still in progress and re-raises the error of a failed one. On a busy machine
    # the failed call can still be listed there when the barrier below starts; then one rank fails in
    # the barrier and the other loses its partner.
    side = dist.new_group()
    try:
        dist.all_reduce(t, op=dist.ReduceOp.AVG, group=side)
        out["all_reduce AVG of int rank+1"] = t.tolist()
    except RuntimeError as exc:
        out["all_reduce AVG of int rank+1"] = short_error(exc)
    finally:
        with contextlib.suppress(RuntimeError):
            dist.destroy_process_group(side)
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["all_reduce MAX of rank+1"] = t.tolist()
    t = torch.tensor([float(rank + 1)])
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
    out["reduce SUM to 0"] = t.tolist()  # only rank 0's result is defined
    parts = [torch.zeros(1) for _ in range(world_size)]
    dist.all_gather(parts, torch.tensor([float(rank * 10)]))
    out["all_gather rank*10"] = [p.item() for p in parts]
    parts = [torch.zeros(1) for _ in range(world_size)] if rank == 0 else None
    dist.gather(torch.tensor([float(rank * 10)]), gather_list=parts, dst=0)
    out["gather rank*10 to 0"] = [p.item() for p in parts] if parts is not None else None
    pieces = [torch.tensor([float(100 + r)]) for r in range(world_size)] if rank == 0 else None
    mine = torch.zeros(1)
    dist.scatter(mine, scatter_list=pieces, src=0)
    out["scatter 100+r from 0"] = mine.tolist()
    dist.barrier()
    out["barrier"] = "passed"
    return out


def ring_check(rank: int, world_size: int, numel: int = 1_003, seed: int = 0) -> dict[str, Any]:
    """The hand-written ring all-reduce against `dist.all_reduce` on the same random tensor."""

    gen = torch.Generator().manual_seed(seed + rank)
    data = torch.randn(numel, generator=gen)
    expected = data.clone()
    dist.all_reduce(expected)
    mine, sent = ring_allreduce(data.clone())
    return {
        "allclose": torch.allclose(mine, expected, atol=1e-5),
        "bytes sent": sent,
        "ring formula": ring_bytes_per_rank(numel * 4, world_size),
    }


def ring_allreduce(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sum `tensor` over all ranks in place with a ring of send/recv; returns it and the bytes this rank sent.

    The tensor is cut into world_size chunks. Reduce-scatter: in step s, rank r sends chunk (r - s) to
    its right neighbour and adds the chunk (r - s - 1) it receives from its left one; after n - 1 steps
    rank r holds the full sum of chunk (r + 1). All-gather: n - 1 more steps pass the finished chunks on.
    Each rank sends 2 (n - 1) / n of the tensor, whatever n is: the reason rings scale.
    """

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    n, rank = dist.get_world_size(), dist.get_rank()
    if n == 1:
        return tensor, 0
    flat = tensor.view(-1)
    chunks = list(torch.tensor_split(flat, n))
    right, left = (rank + 1) % n, (rank - 1) % n
    sent = 0
    for phase in ("reduce-scatter", "all-gather"):
        for step in range(n - 1):
            if phase == "reduce-scatter":
                send_i, recv_i = (rank - step) % n, (rank - step - 1) % n
            else:
                send_i, recv_i = (rank + 1 - step) % n, (rank - step) % n
            incoming = torch.empty_like(chunks[recv_i])
            # isend does not block: every rank can send right and receive from the left at the same time
            request = dist.isend(chunks[send_i].contiguous(), dst=right)
            dist.recv(incoming, src=left)
            request.wait()
            sent += chunks[send_i].numel() * chunks[send_i].element_size()
            if phase == "reduce-scatter":
                chunks[recv_i].add_(incoming)
            else:
                chunks[recv_i].copy_(incoming)
    return tensor, sent


def ring_bytes_per_rank(nbytes: int, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of an `nbytes` tensor: 2 (n - 1) / n x nbytes."""
    world_size = positive_int("world_size", world_size)
    nbytes = positive_int("nbytes", nbytes, minimum=0)
    return 2 * (world_size - 1) / world_size * nbytes


def naive_bytes_per_rank(nbytes: int, world_size: int) -> dict[str, float]:
    """The naive all-reduce: everyone sends its tensor to rank 0, which sums and sends the result back.
    Rank 0 receives and sends (n - 1) x nbytes; it grows with n, the ring's share does not."""
    world_size = positive_int("world_size", world_size)
    nbytes = positive_int("nbytes", nbytes, minimum=0)
    return {"rank 0 sends": (world_size - 1) * nbytes, "other ranks send": float(nbytes)}


def make_model(seed: int = 0, width: int = 8, depth: int = 1, inputs: int = 4, outputs: int = 2) -> Any:
    """A small MLP, identical on every rank that passes the same seed (DDP also broadcasts rank 0's)."""

    torch.manual_seed(seed)
    layers: list[Any] = []
    size = inputs
    for _ in range(depth):
        layers += [nn.Linear(size, width), nn.ReLU()]
        size = width
    layers.append(nn.Linear(size, outputs))
    return nn.Sequential(*layers)


def make_batch(samples: int, seed: int = 1, inputs: int = 4, outputs: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """A regression batch: inputs and targets drawn from a fixed generator (same on every rank)."""
    samples = positive_int("samples", samples)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, inputs, generator=gen)
    y = torch.randn(samples, outputs, generator=gen)
    return x, y


def ddp_gradients(rank: int, world_size: int, batch: int = 8, average: Callable[..., Any] | None = None) -> Any:
    """One step on this rank's share of a batch: gradients from DDP, or from a plain model plus
    `average(model)` (the exercise). Returns the flat gradient and the full-batch gradient of one
    process (computed here on the concatenated batch)."""

    x, y = make_batch(batch * world_size)
    mine = slice(rank * batch, (rank + 1) * batch)
    model = make_model()
    wrapped = DDP(model) if average is None else model
    nn.functional.mse_loss(wrapped(x[mine]), y[mine]).backward()
    if average is not None:
        average(model)
    got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    single = make_model()
    nn.functional.mse_loss(single(x), y).backward()
    full = torch.cat([p.grad.reshape(-1) for p in single.parameters()])
    return got, full


def ddp_check(rank: int, world_size: int, steps: int = 5, batch: int = 8) -> dict[str, Any]:
    """DDP on CPU: (1) one step's gradients equal those of one process on the concatenated batch;
    (2) after several steps the parameters of every rank are still identical; (3) `device_ids` fails."""

    got, full = ddp_gradients(rank, world_size, batch)
    out: dict[str, Any] = {
        "grads allclose full batch": torch.allclose(got, full, atol=1e-6),
        "grads bitwise equal": torch.equal(got, full),
        "max abs difference < 1e-6": (got - full).abs().max().item() < 1e-6,
    }
    model = DDP(make_model(seed=rank))  # different seeds on purpose: DDP broadcasts rank 0's parameters
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(100 + rank)  # every rank its own data
    for _ in range(steps):
        x, y = torch.randn(batch, 4, generator=gen), torch.randn(batch, 2, generator=gen)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = [torch.zeros_like(flat) for _ in range(world_size)]
    dist.all_gather(everyone, flat)
    out["params identical on all ranks"] = all(torch.equal(everyone[0], other) for other in everyone)
    try:
        DDP(make_model(), device_ids=[rank])
        out["device_ids=[rank]"] = "no error"
    except Exception as exc:  # noqa: BLE001 - shown as the lesson
        out["device_ids=[rank]"] = short_error(exc)
    return out


def checkpoint(rank: int, world_size: int, path: str = "") -> dict[str, Any]:
    """Save on rank 0 only, barrier, then every rank loads with `weights_only=True`."""

    model = DDP(make_model(seed=rank))
    if rank == 0:
        torch.save(model.module.state_dict(), path)  # .module: no "module." prefix in the keys
    dist.barrier()  # nobody reads before rank 0 has finished writing
    state = torch.load(path, weights_only=True)
    fresh = make_model(seed=1234)
    fresh.load_state_dict(state)
    same = all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.module.parameters(), strict=True))
    return {"loaded equals the live model": same, "keys": list(state)[:2]}


# -------------------------------------------------------------------------------------------- sampler
def sampler_indices(length: int, world_size: int, shuffle: bool = False, drop_last: bool = False) -> dict[int, list]:
    """The indices each rank's `DistributedSampler` yields for one epoch (no process group needed: the
    sampler only uses `num_replicas` and `rank`)."""
    from torch.utils.data import DistributedSampler

    length = positive_int("length", length)
    world_size = positive_int("world_size", world_size)
    data = range(length)
    return {
        r: list(DistributedSampler(data, num_replicas=world_size, rank=r, shuffle=shuffle, drop_last=drop_last))
        for r in range(world_size)
    }


def epoch_orders(length: int, epochs: int, set_epoch: bool, rank: int = 0, world_size: int = 2) -> list[list[int]]:
    """What rank `rank` sees in each of `epochs` epochs with `shuffle=True`, with or without `set_epoch`."""
    from torch.utils.data import DistributedSampler

    rank, world_size = check_rank(rank, world_size)
    sampler = DistributedSampler(range(positive_int("length", length)), num_replicas=world_size, rank=rank, seed=0)
    orders = []
    for epoch in range(positive_int("epochs", epochs)):
        if set_epoch:
            sampler.set_epoch(epoch)
        orders.append(list(sampler))
    return orders


# ----------------------------------------------------------------------------------- network checks
_PROBE = """
import datetime, json, os, sys, time
import psutil
os.environ["GLOO_SOCKET_IFNAME"] = "lo"
os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ["MASTER_PORT"] = sys.argv[1]
import torch.distributed as dist
from helpers.launcher import listening_addresses
wait = datetime.timedelta(seconds=20)
dist.init_process_group("gloo", rank=0, world_size=1, timeout=wait)
found = {"listens": listening_addresses()}
dist.destroy_process_group()
# TIME_WAIT: a store and a client talk, the store closes first, then the client: the store's side of the
# connection (on the store's port) is left in TIME_WAIT. Then a new store binds that port.
port = int(sys.argv[2])
def states():
    return sorted({c.status for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port})
server = dist.TCPStore("127.0.0.1", port, 1, True, wait)
client = dist.TCPStore("127.0.0.1", port, 1, False, wait)
client.set("k", "v")
del server
time.sleep(0.1)
del client
deadline = time.monotonic() + 5
while psutil.CONN_TIME_WAIT not in states() and time.monotonic() < deadline:
    time.sleep(0.05)
found["time_wait"] = psutil.CONN_TIME_WAIT in states()
started = time.monotonic()
again = dist.TCPStore("127.0.0.1", port, 1, True, wait)
found["rebound within 1 s"] = time.monotonic() - started < 1
del again
print(json.dumps(found))
"""


def default_store_probe(timeout: float = 30.0) -> dict[str, Any]:
    """torch's defaults, checked in a child process (in a private network namespace when available):
    "listens", where a plain `init_process_group("gloo")` with `MASTER_ADDR=127.0.0.1` listens while
    its group is alive; "time_wait", whether a store's port was left in TIME_WAIT after it closed; and
    "rebound within 1 s", whether a new `TCPStore` then bound that same port at once."""
    out = isolated([sys.executable, "-c", _PROBE, str(free_port()), str(free_port())], timeout=timeout)
    return json.loads(out.strip().splitlines()[-1])


def two_node_commands(kind: str, host: str = "10.0.0.1", port: int = 29400, script: str = "ddp_train.py") -> list[str]:
    """The commands a learner types on two machines (node 0 first), for `kind` "c10d" or "static"."""
    if kind == "c10d":
        common = f"torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint={host}:{port}"
        return [f"{common} --rdzv-id=job42 {script}"] * 2
    if kind == "static":
        common = f"torchrun --nnodes=2 --nproc-per-node=1 --master-addr={host} --master-port={port}"
        return [f"{common} --node-rank={node} {script}" for node in (0, 1)]
    raise ValueError(f"kind must be 'c10d' or 'static', got {kind!r}")


def torchrun_job(kind: str, steps: int = 3, timeout: float = 120.0) -> list[dict[str, Any]]:
    """One of the notebook's torchrun jobs, run with `dd.SCRIPT`; what each rank wrote, sorted by RANK.

    `kind`: "standalone" (one machine, `--standalone --nproc-per-node=2`), or two "nodes" on this machine,
    each a `torchrun` with one process, meeting through a "c10d" or a "static" rendezvous. Each job is a
    call of its own, so that a learner can re-run one (and a busy machine gives each its own time)."""
    if kind not in ("standalone", "c10d", "static"):
        raise ValueError(f"kind must be 'standalone', 'c10d' or 'static', got {kind!r}")
    steps = positive_int("steps", steps)
    if kind == "standalone":
        return torchrun_standalone(SCRIPT, ["{results}", str(steps)], 2, timeout=timeout).results
    args = ["{results}", str(steps), "node{node}"]
    # --node-rank is passed to c10d too, on purpose: torchrun ignores it there (see the results)
    options = ["--node-rank={node}"] if kind == "c10d" else []
    return torchrun_two_nodes(SCRIPT, kind, args, options=options, timeout=timeout).results


def torchrun_all(steps: int = 3, timeout: float = 120.0) -> dict[str, list[dict[str, Any]]]:
    """The three torchrun jobs of the notebook ("standalone", "c10d", "static"), one after another (side
    by side they would save a few seconds but load the machine at the moment each job shuts down)."""
    return {kind: torchrun_job(kind, steps, timeout) for kind in ("standalone", "c10d", "static")}


# ----------------------------------------------------------------------------------------- speed
@dataclass
class TrainRun:
    """Steady-state throughput of one DDP (or single-process) training run, timed in rounds."""

    world_size: int
    threads: int
    rounds: list[float]  # samples/s over all ranks in each timed round (a round: `steps` steps)
    startup: float  # seconds from launch to the first timed step (process start + group + warm-up)
    load: Load  # what other programs did to the machine during the launch

    @property
    def samples_per_s(self) -> float:
        """The median round: one noisy round on a shared machine does not move it."""
        return statistics.median(self.rounds)

    @property
    def spread(self) -> Spread:
        return spread(self.rounds)


def _sgd_step(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    """One SGD step of `net` on the batch (x, y), as a function to call in a timed loop."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)

    def step() -> None:
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()

    return step


def timed_training(
    rank: int,
    world_size: int,
    batch: int = 1024,
    width: int = 512,
    depth: int = 3,
    steps: int = 3,
    rounds: int = 5,
    warmup: int = 2,
) -> dict[str, Any]:
    """Train an MLP (DDP when world_size > 1) on `batch` samples per rank per step: `warmup` steps, then
    `rounds` rounds of `steps` steps, each round timed between barriers (every rank starts and ends it
    together). Returns the seconds of each round and the wall-clock time of the first timed step."""

    model = make_model(width=width, depth=depth, inputs=width, outputs=10)
    step = _sgd_step(DDP(model) if world_size > 1 else model, torch.randn(batch, width), torch.randint(0, 10, (batch,)))
    for _ in range(warmup):
        step()
    times = []
    first = 0.0
    for r in range(rounds):
        dist.barrier()
        started = time.perf_counter()
        if r == 0:
            first = time.time()
        for _ in range(steps):
            step()
        dist.barrier()
        times.append(time.perf_counter() - started)
    return {"seconds": times, "first_step": first}


def timed_shapes(rank: int, world_size: int, shapes: dict[str, dict[str, int]], **kw: int) -> dict[str, Any]:
    """`timed_training` for each named shape in turn, in one group (one process start for all)."""
    return {name: timed_training(rank, world_size, **kw, **shape) for name, shape in shapes.items()}


def ddp_throughputs(
    world_size: int, shapes: dict[str, dict[str, int]], threads: int = 1, steps: int = 3, rounds: int = 5
) -> dict[str, TrainRun]:
    """Weak scaling: for each named shape (`batch`, `width`, `depth` of `timed_training`) every rank
    trains on `batch` samples per step; samples/s over all ranks in each of `rounds` rounds of `steps`
    steps, timed from a barrier after warm-up. All shapes run in one launch, whose machine load is
    measured. Several threads per process need spawn (a forked child of a threaded parent hangs in
    OpenMP). `startup` is the time from the launch to the first timed step of the first shape."""
    world_size = positive_int("world_size", world_size)
    threads = positive_int("threads", threads)
    if not isinstance(shapes, dict) or not shapes:
        raise TypeError("shapes must be a non-empty dict of name -> {batch, width, depth}")
    kw = {"shapes": shapes, "steps": positive_int("steps", steps), "rounds": positive_int("rounds", rounds)}
    method = "spawn" if threads > 1 else default_start_method()
    started = time.time()
    with measure_load() as load:
        results = launch(
            [timed_shapes], world_size, start_method=method, threads=threads, kwargs={"timed_shapes": kw}, timeout=300
        )
    assert load.result is not None
    runs = {}
    for name, shape in shapes.items():
        rows = [results[r]["timed_shapes"][name] for r in results]
        samples = world_size * shape.get("batch", 1024) * steps
        per_round = [samples / max(row["seconds"][i] for row in rows) for i in range(rounds)]
        first = min(row["first_step"] for row in rows)
        runs[name] = TrainRun(world_size, threads, per_round, first - started, load.result)
    return runs


def which_wins(a: str, run_a: TrainRun, b: str, run_b: TrainRun) -> str:
    """Which of two runs was faster, judged by all their rounds, not one: a run wins only when even its
    slowest round beat the other's fastest; when their ranges overlap, they are within noise."""
    if not isinstance(run_a, TrainRun) or not isinstance(run_b, TrainRun):
        raise TypeError("run_a and run_b must be TrainRun results of ddp_throughputs")
    if run_a.spread.low > run_b.spread.high:
        return f"{a} was faster in every round: {run_a.samples_per_s / run_b.samples_per_s:.2f}x the median of {b}"
    if run_b.spread.low > run_a.spread.high:
        return f"{b} was faster in every round: {run_b.samples_per_s / run_a.samples_per_s:.2f}x the median of {a}"
    return f"{a} and {b}: within noise of each other (their rounds overlap)"


def timed_side_by_side(
    rank: int, world_size: int, batch: int = 1024, width: int = 512, depth: int = 3, steps: int = 5, rounds: int = 5
) -> dict[str, Any]:
    """Each round, rank 0 first trains a plain copy of the model alone (the others wait in a barrier,
    asleep), then every rank trains the DDP model: the one-process baseline and DDP take turns in the same
    processes, so that a slow spell of the machine hits both sides instead of one launch.

    Where processes can be pinned (Linux), rank 0 also probes the cores' speeds before each round and
    after the last (`timing.core_speeds`, while the others wait), and trains alone on the core that was
    fastest: a virtual machine's host can slow one core for seconds, and the baseline would otherwise run
    at the speed of whichever core it landed on."""
    x = torch.randn(batch, width)
    y = torch.randint(0, 10, (batch,))
    step_ddp = _sgd_step(DDP(make_model(width=width, depth=depth, inputs=width, outputs=10)), x, y)
    alone = make_model(width=width, depth=depth, inputs=width, outputs=10) if rank == 0 else None
    step_alone = _sgd_step(alone, x, y) if alone is not None else None
    for _ in range(2):  # warm-up
        step_ddp()
        if step_alone is not None:
            step_alone()
    probes: list[list[float]] = []
    fastest_core = functools.partial(probe_fastest_core, probes) if rank == 0 else lambda: None

    single, together = [], []
    first = 0.0
    for r in range(rounds):
        dist.barrier()
        if r == 0:
            first = time.time()
        if step_alone is not None:
            with pinned(fastest_core()):
                started = time.perf_counter()
                for _ in range(steps):
                    step_alone()
                single.append(time.perf_counter() - started)
        dist.barrier()
        started = time.perf_counter()
        for _ in range(steps):
            step_ddp()
        dist.barrier()
        together.append(time.perf_counter() - started)
    fastest_core()  # the speeds after the last round
    return {"single": single, "ddp": together, "first_step": first, "core_speeds": probes}


@dataclass(frozen=True)
class WeakScaling:
    """What `weak_scaling` measured: both sides' rounds, and the cores' speeds probed around them."""

    single: TrainRun  # one process at 1 thread, on the core that was fastest where it could be pinned
    ddp: TrainRun
    core_speeds: list[list[float]]  # before each round and after the last; empty where nothing can be pinned


def weak_scaling(
    world_size: int, batch: int = 1024, width: int = 512, depth: int = 3, steps: int = 5, rounds: int = 5
) -> WeakScaling:
    """One process at 1 thread and DDP on `world_size` ranks at 1 thread each, measured in turns within one
    launch (`timed_side_by_side`); samples/s of each round, the DDP round timed as its slowest rank's."""
    world_size = positive_int("world_size", world_size)
    if world_size < 2:
        raise ValueError(f"world_size must be at least 2 (DDP beside one process), got {world_size}")
    kw = {
        "batch": positive_int("batch", batch),
        "width": positive_int("width", width),
        "depth": positive_int("depth", depth),
        "steps": positive_int("steps", steps),
        "rounds": positive_int("rounds", rounds),
    }
    started = time.time()
    with measure_load() as load:
        results = launch([timed_side_by_side], world_size, kwargs={"timed_side_by_side": kw}, timeout=300)
    assert load.result is not None
    rows = [results[r]["timed_side_by_side"] for r in sorted(results)]
    startup = min(row["first_step"] for row in rows) - started
    single = [batch * steps / s for s in rows[0]["single"]]
    together = [world_size * batch * steps / max(row["ddp"][i] for row in rows) for i in range(rounds)]
    return WeakScaling(
        TrainRun(1, 1, single, startup, load.result),
        TrainRun(world_size, 1, together, startup, load.result),
        rows[0]["core_speeds"],
    )


def ddp_throughput(
    world_size: int,
    threads: int = 1,
    batch: int = 1024,
    width: int = 512,
    depth: int = 3,
    steps: int = 5,
    rounds: int = 5,
) -> TrainRun:
    """`ddp_throughputs` for one shape (the bench's `ddp_speedup`)."""
    shape = {"batch": batch, "width": width, "depth": depth}
    return ddp_throughputs(world_size, {"run": shape}, threads=threads, steps=steps, rounds=rounds)["run"]


def ring_timing(rank: int, world_size: int, numel: int = 1 << 20, repeats: int = 10) -> dict[str, list[float]]:
    """Seconds of each of `repeats` all-reduces of a `numel` float32 tensor, the hand-written ring and
    `dist.all_reduce` taking turns (so that a burst of load hits both), each started from a barrier."""

    data = torch.randn(numel)
    methods: dict[str, Callable[[torch.Tensor], Any]] = {"ring": ring_allreduce, "all_reduce": dist.all_reduce}
    times: dict[str, list[float]] = {name: [] for name in methods}
    for i in range(repeats + 1):  # the first round warms up
        for name, fn in methods.items():
            t = data.clone()
            dist.barrier()
            started = time.perf_counter()
            fn(t)
            if i:
                times[name].append(time.perf_counter() - started)
    return times


def ring_vs_allreduce(nbytes: int = 4 << 20, repeats: int = 10, world_size: int = 2) -> dict[str, Any]:
    """Seconds per all-reduce of an `nbytes` float32 tensor, hand-written ring vs `dist.all_reduce`:
    {"ring": Spread, "all_reduce": Spread, "load": Load}, each a median over `repeats` with its range
    (one all-reduce is timed as the slowest rank's)."""
    numel = positive_int("nbytes", nbytes) // 4
    kw = {"ring_timing": {"numel": numel, "repeats": positive_int("repeats", repeats)}}
    with measure_load() as load:
        results = launch([ring_timing], world_size, kwargs=kw)
    return {"load": load.result, **ring_times(results)}


def ring_times(results: dict[int, dict[str, Any]]) -> dict[str, Spread]:
    """From a launch that ran `ring_timing`: the median, best and worst seconds per call of each method,
    a call lasting as long as its slowest rank."""
    out = {}
    for name in ("ring", "all_reduce"):
        per_call = zip(*(results[r]["ring_timing"][name] for r in sorted(results)), strict=True)
        out[name] = spread(max(times) for times in per_call)
    return out


def ring_reading(times: dict[str, Spread]) -> str:
    """The speed of the ring by hand relative to `dist.all_reduce`, from `ring_times`, naming a winner only
    when the median calls and the best calls agree on it: on a shared machine one slow call moves a
    median of 15, while the best calls show what the copying allows."""
    if not isinstance(times, dict) or not all(isinstance(times.get(k), Spread) for k in ("ring", "all_reduce")):
        raise TypeError("times must be the dict of Spreads that ring_times returns")
    ring, gloo = times["ring"], times["all_reduce"]
    by_median, by_best = gloo.median / ring.median, gloo.low / ring.low  # above 1: the ring was faster
    if by_median > 1.1 and by_best > 1.1:
        verdict = "the ring by hand was faster by both measures"
    elif by_median < 0.9 and by_best < 0.9:
        verdict = "dist.all_reduce was faster by both measures"
    else:
        verdict = "no winner: the two measures do not agree on one beyond 10 %, so the difference is noise"
    return (
        f"ring by hand, speed relative to dist.all_reduce: {by_median:.2f}x from the medians,"
        f" {by_best:.2f}x from the best calls: {verdict}"
    )


# ----------------------------------------------------------------------------------- failure demos
def uneven_rank(
    rank: int, world_size: int, ending: str = "join", group_timeout: float = 3.0, stamps: str | None = None
) -> dict[str, Any]:
    """Rank r has 2 + r batches. `ending`: "barrier" (the short rank then waits in a collective of its
    own: both ranks wait until the group's timeout, then raise), "return" (it just leaves: the others'
    next all-reduce fails), "join" (the `Join` context manager shadows the missing all-reduces).

    "barrier" trains on a group of its own, made with `timeout=group_timeout` seconds (the default
    group's is 30 min with gloo; `init_process_group(timeout=...)` sets it), and reports where each rank
    waited and for how long. Both ranks then meet in a barrier of the default group, so that neither
    leaves (which would close the connection the other still waits on) before both have timed out.

    With `stamps` (a folder), each rank also writes where and since when it waits to
    `stamps/rank<r>.json` before every wait: gloo sometimes aborts a rank (SIGABRT) instead of raising,
    and then the file is all that is left of it."""

    if ending not in ("barrier", "return", "join"):
        raise ValueError(f"ending must be 'barrier', 'return' or 'join', got {ending!r}")
    group = None
    if ending == "barrier":
        if isinstance(group_timeout, bool) or not isinstance(group_timeout, int | float) or group_timeout <= 0:
            raise ValueError(f"group_timeout must be a number of seconds > 0, got {group_timeout!r}")
        dist.barrier()  # the ranks arrive together: a group's timeout also bounds its own setup
        group = dist.new_group(timeout=datetime.timedelta(seconds=group_timeout))
    model = DDP(make_model(), process_group=group)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [make_batch(4, seed=10 * rank + i) for i in range(2 + rank)]
    where = {"call": "backward (DDP's all-reduce)", "since": time.monotonic()}

    def waiting(call: str) -> None:
        where.update(call=call, since=time.monotonic())
        if stamps is not None:
            Path(stamps, f"rank{rank}.json").write_text(json.dumps(where))

    def train() -> None:
        for x, y in batches:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            waiting("backward (DDP's all-reduce)")
            loss.backward()
            optimizer.step()

    try:
        if ending == "join":
            with Join([model]):
                train()
        else:
            train()
            if ending == "barrier":
                waiting("barrier")
                dist.barrier(group=group)
    except Exception as exc:  # noqa: BLE001 - the error is the result
        failed_at = time.monotonic()  # system-wide on Linux and macOS: comparable between the ranks
        return {
            "batches": len(batches),
            "outcome": describe_error(exc),
            "waited in": where["call"],
            "seconds": failed_at - where["since"],
            "began waiting at": where["since"],
            "failed at": failed_at,
        }
    finally:
        if group is not None:
            # The default group: nobody leaves before the other rank has timed out too. A rank that gloo
            # aborted has no one to wait for: this barrier then fails at once, and must not cost this
            # rank the result it is returning.
            with contextlib.suppress(RuntimeError):
                dist.barrier()
            with contextlib.suppress(RuntimeError):
                dist.destroy_process_group(group)
    return {"batches": len(batches), "outcome": "finished"}


_ABORTED = "gloo aborted the process instead of raising"


def _outcomes(results: dict[int, dict[str, Any]], demo: str) -> dict[int, Any]:
    """Each rank's result of `demo`, or, for a rank that died before finishing it, how it ended. Only a
    SIGABRT is gloo's abort; any other ending (an exit code from an error raised outside the demo, another
    signal) is reported as it was, so that a real failure is not mistaken for the demo's known one."""
    return {r: results[r].get(demo, _ending(results[r].get("exit", "no result"))) for r in sorted(results)}


def _ending(exit_text: str) -> str:
    return f"{exit_text} ({_ABORTED})" if exit_text == "killed by SIGABRT" else exit_text


def uneven(
    endings: Sequence[str] = ("barrier", "join", "return"),
    world_size: int = 2,
    timeout: float = 60.0,
    group_timeout: float = 3.0,
) -> dict[str, dict[int, dict[str, Any]]]:
    """The uneven-inputs job with each of `endings` in turn, in one launch; returns
    `{ending: {rank: {"batches", "outcome", "failed", ...}}}`. See `uneven_rank`; "barrier" rows also
    say where each rank waited, for how many seconds ("seconds"), and how long after the first rank began
    to wait it raised ("after first wait", at least `group_timeout` on every run; see `_after_first_wait`).

    "return" breaks the group, so it must come last. A rank left alone in a collective either raises
    (connection closed or reset by peer) or is aborted by gloo (SIGABRT, seen about once in ten runs
    on a loaded machine): "failed" is True in both cases, "outcome" says which it was."""
    if isinstance(endings, str):
        endings = [endings]
    for ending in endings:
        if ending not in ("barrier", "return", "join"):
            raise ValueError(f"endings must be 'barrier', 'return' or 'join', got {ending!r}")
    if not endings or "return" in endings[:-1]:
        raise ValueError("endings must be a non-empty list with 'return', if present, last: it breaks the group")
    if isinstance(group_timeout, bool) or not isinstance(group_timeout, int | float) or group_timeout <= 0:
        raise ValueError(f"group_timeout must be a number of seconds > 0, got {group_timeout!r}")
    names = [f"uneven_{ending}" for ending in endings]
    with tempfile.TemporaryDirectory(prefix="uneven-") as folder:
        stamps = {ending: os.path.join(folder, ending) for ending in endings}
        for path in stamps.values():
            os.mkdir(path)
        demos = {
            name: functools.partial(uneven_rank, ending=ending, group_timeout=group_timeout, stamps=stamps[ending])
            for name, ending in zip(names, endings, strict=True)
        }
        results = launch(demos, world_size, timeout=timeout, failures="report")
        table: dict[str, dict[int, dict[str, Any]]] = {}
        for ending, name in zip(endings, names, strict=True):
            table[ending] = {}
            for rank, row in _outcomes(results, name).items():
                if isinstance(row, str):  # the process died: what it stamped before its last wait
                    row = {"batches": 2 + rank, "outcome": row, **_stamp(stamps[ending], rank)}
                table[ending][rank] = {**row, "failed": row["outcome"] != "finished"}
            _after_first_wait(table[ending])
    return table


def _stamp(folder: str, rank: int) -> dict[str, Any]:
    """Where and since when rank `rank` last began to wait, from its stamp file ({} if it wrote none)."""
    path = Path(folder, f"rank{rank}.json")
    if not path.is_file():
        return {}
    where = json.loads(path.read_text())
    return {"waited in": where["call"], "began waiting at": where["since"]}


def first_error_after(rows: dict[int, dict[str, Any]]) -> float | None:
    """Seconds from the moment the first rank began to wait until the first rank *raised* (None if no rank
    raised). Whichever gloo timer fires first, this is at least the group's timeout: see
    `_after_first_wait`."""
    late = [row["after first wait"] for row in rows.values() if "after first wait" in row]
    return min(late) if late else None


def _after_first_wait(rows: dict[int, dict[str, Any]]) -> None:
    """Add to each failed rank's row "after first wait": the seconds from the moment the *first* rank
    began to wait until this rank raised.

    A rank's own wait is not the right yardstick. The first gloo timer to fire ends the wait of its rank
    and closes the connection, so the other rank raises at that moment, which may be a little *before*
    its own timer's end (whichever rank started waiting first). What holds on every run is that no rank
    raised before the group's timeout had passed since the first rank began to wait: that is what
    "after first wait" lets a reader check."""
    starts = [row["began waiting at"] for row in rows.values() if "began waiting at" in row]
    if not starts:
        return
    first = min(starts)
    for row in rows.values():
        if "failed at" in row:
            row["after first wait"] = row["failed at"] - first


def watch_hang(target: Callable[..., Any], reach: str, timeout: float = 6.0, attempts: int = 4, **kwargs: Any) -> Any:
    """`watchdog.run(target, **kwargs)` for a demo that hangs once it has reached the function `reach`.

    A hang demo is only a hang once the process waits where the lesson says. Before that it starts
    processes, imports torch (and, at the first `DDP(...)`, `torch._dynamo`) and joins a group, which
    takes several times longer on a busy machine. If the watchdog's deadline came before `reach` was on
    the stack, the demo runs again with twice the time (at most `attempts` runs): the printed outcome
    is the same on an idle laptop and on one with every core busy."""
    import torch._dynamo  # noqa: F401 - the first DDP(...) of a process imports it; a forked child inherits it now

    from helpers import watchdog

    if not isinstance(reach, str) or not reach:
        raise TypeError("reach must be the name of the function the hang waits in")
    attempts = positive_int("attempts", attempts)
    for _ in range(attempts):
        outcome = watchdog.run(target, timeout=timeout, expect="hang", **kwargs)
        if outcome.status != "hung" or reach in [name.split(".")[-1] for name in outcome.stack]:
            break  # it got there, or it did not hang at all: more time would not change that
        timeout *= 2
    return outcome


def mismatch_rank(rank: int, world_size: int) -> str:

    t = torch.ones(2 + rank)  # rank 0 sends 2 numbers, rank 1 sends 3
    try:
        dist.all_reduce(t)
    except Exception as exc:  # noqa: BLE001 - the error is the result
        return describe_error(exc)
    return f"finished, holds {t.tolist()}"


def mismatch(debug: bool, timeout: float = 30.0) -> dict[int, str]:
    """An all_reduce whose tensors differ in shape across ranks, with or without
    `TORCH_DISTRIBUTED_DEBUG=DETAIL`; returns what each rank ended with (error line, its tensor, or,
    without DETAIL, how its process died: gloo may abort it instead of raising)."""
    env = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL" if debug else "OFF"}
    results = launch([mismatch_rank], 2, env=env, timeout=timeout, failures="report")
    return _outcomes(results, "mismatch_rank")


def foreign_listener_client(timeout: float = 2.0) -> str:
    """A store client whose port is held by something that is not a store (a plain listening socket
    that never answers): meant to run under the watchdog, because `timeout=` does not save it."""

    with socket.socket() as foreign:
        foreign.bind((LOOPBACK, 0))
        foreign.listen(1)
        port = foreign.getsockname()[1]
        dist.TCPStore(LOOPBACK, port, 2, False, datetime.timedelta(seconds=timeout))
    return "connected"


def store_host_on_taken_port() -> str:
    """The rank that hosts the store, on a port something else already listens on: fails at once."""

    with socket.socket() as other:
        other.bind((LOOPBACK, 0))
        other.listen(1)
        port = other.getsockname()[1]
        started = time.monotonic()
        try:
            dist.TCPStore(LOOPBACK, port, 1, True, datetime.timedelta(seconds=5))
        except Exception as exc:  # noqa: BLE001 - the error is the result
            return f"{describe_error(exc)} (within 1 s: {time.monotonic() - started < 1})"
    return "no error"


def clean_line(text: str) -> str:
    """`helpers.errors.clean` for one line (kept here so the notebook imports one module)."""
    return clean(text)
