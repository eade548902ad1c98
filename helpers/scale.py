"""Chapter 10, from 2 ranks to a thousand: what each rank of a large job holds and sends, simulated in one
process, and checked against formulas and against a real 2-rank gloo run.

The simulation has two parts, both from torch:
- a "fake" process group (`torch.testing._internal.distributed.fake_pg.FakeStore`, then
  `init_process_group("fake", rank=r, world_size=n, store=...)`): this process becomes rank r of an n-rank
  job; every collective returns at once and moves nothing;
- `FakeTensorMode` (`torch._subclasses.fake_tensor`): tensors with shapes, dtypes and devices but no
  storage, so a model of billions of parameters is built, sharded, trained one step and measured without
  the memory it would need.
Both are internal to torch (torchtitan's memory estimator uses them the same way); `pinned_internals`
lists what this chapter relies on and tests/test_scale.py pins it.

What is real: the layouts' own code (`fully_shard`, `parallelize_module`, `ZeroRedundancyOptimizer`, the
optimizer's step), so the shapes each rank holds and the collectives each step calls, with their sizes.
What is not: every value (a fake collective's result is garbage, a fake tensor has none), time, overlap.

Every rank function is `fn(rank, world_size, **kw)` at module level, so spawn children can import it.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from helpers.validate import positive_int

__all__ = [
    "MODEL",
    "SMALL",
    "LAYOUTS",
    "MIXED",
    "ALL_LAYOUTS",
    "ONE_D",
    "WORLDS",
    "Block",
    "make_model",
    "parameter_count",
    "fake_group",
    "mesh_dims",
    "one_step",
    "simulate",
    "real_rank",
    "held_formula",
    "calculator",
    "activation_bytes",
    "sent_formula",
    "sent_per_rank",
    "by_kind",
    "pinned_internals",
    "simulation_vs_real",
    "sim_over_real_bytes",
    "SWEEP",
    "allreduce_sweep",
    "fit_allreduce",
    "allreduce_model",
    "CLUSTER",
    "step_seconds",
    "pretrained",
    "checkpointing",
    "pipeline_clip",
    "offload",
]

MODEL = {"hidden": 8192, "layers": 4, "batch": 4096}  # 4 blocks of 8192 -> 32768 -> 8192: 2.15 billion parameters;
# batch: the tokens of one step on each data-parallel rank (batch x sequence length)
SMALL = {"hidden": 64, "layers": 2, "batch": 8}  # the same architecture, small enough for 2 real ranks
WORLDS = (8, 64, 1024)
TP = 8  # tensor parallelism stays inside one machine of 8 devices
RESHARD_TO = 8  # `reshard_after_forward=8`: after the forward keep the parameters gathered over 8 ranks
LAYOUTS = ("DDP", "ZeRO-1", "FSDP", "FSDP no reshard", "FSDP reshard to 8", "TP", "FSDP x TP", "HSDP")
MIXED = "FSDP bf16"  # FSDP with MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)
ALL_LAYOUTS = (*LAYOUTS, MIXED)
ONE_D = ("DDP", "ZeRO-1", "FSDP", "FSDP no reshard", "TP", MIXED)  # the layouts that run on 2 real ranks


class Block(nn.Module):
    """A transformer's MLP block, `down(relu(up(x)))`, with `up` 4x wider: the layer tensor parallelism
    splits column-wise then row-wise (chapter 09, section 4)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def make_model(hidden: int = MODEL["hidden"], layers: int = MODEL["layers"], device: str = "meta") -> nn.Sequential:
    """`layers` Blocks of width `hidden`, on `device` ("meta": shapes only, no memory, no values)."""
    hidden, layers = positive_int("hidden", hidden), positive_int("layers", layers)
    with torch.device(device):
        return nn.Sequential(*[Block(hidden) for _ in range(layers)])


def parameter_count(hidden: int = MODEL["hidden"], layers: int = MODEL["layers"]) -> int:
    """Parameters of `make_model(hidden, layers)`: per block, `up` h x 4h + 4h and `down` 4h x h + h
    (tests/test_scale.py counts them on the model itself)."""
    hidden, layers = positive_int("hidden", hidden), positive_int("layers", layers)
    return layers * (8 * hidden * hidden + 5 * hidden)


@contextlib.contextmanager
def fake_group(rank: int, world_size: int) -> Iterator[None]:
    """Make this process rank `rank` of a `world_size`-rank job whose collectives move nothing, and undo it."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    world_size = positive_int("world_size", world_size)
    rank = positive_int("rank", rank, minimum=0)
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size ({world_size}), got {rank}")
    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process; destroy it first")
    dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()
        _clear_dtensor_caches()


def _clear_dtensor_caches() -> None:
    """Forget DTensor's cached sharding decisions. A device mesh compares equal to another of the same
    ranks and layout, whichever of its slices this rank sits in, so after one simulation as a rank of
    pipeline stage 1 the cache handed a rank of stage 0 the old mesh, whose process group no longer
    exists ("Could not resolve the process group registered under the name ...")."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._redistribute import clear_redistribute_planner_cache

    torch._C._clear_DTensor_sharding_propagator_cache()  # the C++ fast path's
    DTensor._op_dispatcher.sharding_propagator.propagate_op_sharding.cache_clear()  # and Python's
    clear_redistribute_planner_cache()


def mesh_dims(layout: str, world_size: int, pp: int = 1) -> tuple[int, ...]:
    """The device mesh a layout uses at `world_size` ranks: 1-D, or (data parallel, TP) / (replicas, shard);
    with `pp` pipeline stages > 1, a first dimension of `pp` stages, each stage's ranks laid out as the
    layout is at world_size / pp ranks."""
    if layout not in ALL_LAYOUTS:
        raise ValueError(f"layout must be one of {ALL_LAYOUTS}, got {layout!r}")
    world_size = positive_int("world_size", world_size)
    if positive_int("pp", pp) > 1:
        if world_size % pp:
            raise ValueError(f"pp must divide world_size ({world_size}), got {pp}")
        return (pp, *mesh_dims(layout, world_size // pp))
    if layout in ("FSDP x TP", "HSDP"):
        if world_size % TP:
            raise ValueError(f"{layout} needs world_size a multiple of {TP}, got {world_size}")
        return (world_size // TP, TP)
    return (world_size,)


# ---------------------------------------------------------------------------------------- collectives
class CollectiveLog(torch.utils._python_dispatch.TorchDispatchMode):
    """Every collective that passes torch's dispatcher (FSDP's, DTensor's, `dist.*`'s): its kind, the size
    of the group it runs in, and the bytes of the whole tensor it is about (an all-gather's output, a
    reduce-scatter's input, an all-reduce's or a broadcast's tensor)."""

    KINDS = {
        "_allgather_base_": "all-gather",
        "allgather_": "all-gather",
        "all_gather_into_tensor": "all-gather",
        "_reduce_scatter_base_": "reduce-scatter",
        "reduce_scatter_tensor": "reduce-scatter",
        "allreduce_": "all-reduce",
        "all_reduce": "all-reduce",
        "broadcast_": "broadcast",
        "send": "send",  # point to point (a pipeline's stage boundary); the receiver's recv_ is not counted
    }

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int, int]] = []  # (kind, group size, bytes of the whole tensor)
        self.machines: list[int] = []  # per call, how many machines of `TP` ranks its group spans

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        import torch.distributed as dist

        name = func.__name__.split(".")[0]
        if func.namespace in ("c10d", "_c10d_functional", "c10d_functional") and name in self.KINDS:
            group = _group(func, args)
            self.calls.append((self.KINDS[name], group.size(), _whole_bytes(self.KINDS[name], args)))
            if name == "send":  # this rank and the destination (its rank in `group`, the 3rd argument)
                ranks = [dist.get_rank(), dist.get_global_rank(group, args[2])]
            else:
                ranks = dist.get_process_group_ranks(group)
            self.machines.append(len({r // TP for r in ranks}))
        return func(*args, **(kwargs or {}))


def _group(func: Any, args: Any) -> Any:
    """The process group a collective runs in, from its schema: a `process_group` (a ScriptObject that
    `ProcessGroup.unbox` turns back into the group) or a functional collective's `group_name`."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    for arg, value in zip(func._schema.arguments, args, strict=False):
        if arg.name == "group_name":
            return _resolve_process_group(value)
        if arg.name == "process_group":
            return dist.ProcessGroup.unbox(value)
    raise RuntimeError(f"collective {func} without a process group")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _whole_bytes(kind: str, args: Any) -> int:
    first = args[0]
    tensors = first if isinstance(first, (list, tuple)) else [first]
    if kind == "reduce-scatter" and isinstance(args[1], torch.Tensor):
        return _nbytes(args[1])  # (output, input): the input is the whole tensor
    if kind == "all-gather" and isinstance(first, list):
        return sum(_nbytes(t) for t in first[0]) if first and isinstance(first[0], list) else 0
    return sum(_nbytes(t) for t in tensors)


def sent_per_rank(kind: str, group: int, nbytes: int) -> float:
    """Bytes one rank sends for one collective in the ring algorithms (notebook 05): an all-gather or a
    reduce-scatter of a `nbytes` tensor over `group` ranks sends (g - 1) / g of it, an all-reduce (a
    reduce-scatter then an all-gather) twice that; a broadcast's root sends the tensor once (a pipeline
    of chunks along a ring or tree), which we charge to every rank as an upper bound; a send, its tensor."""
    group = positive_int("group", group)
    if kind == "send":
        return float(nbytes)
    if kind in ("all-gather", "reduce-scatter"):
        return nbytes * (group - 1) / group
    if kind == "all-reduce":
        return 2 * nbytes * (group - 1) / group
    if kind == "broadcast":
        return float(nbytes) if group > 1 else 0.0
    raise ValueError(f"kind must be all-gather, reduce-scatter, all-reduce, broadcast or send, got {kind!r}")


def by_kind(calls: list[tuple[str, int, int]]) -> dict[str, dict[str, float]]:
    """Per kind of collective: how many calls, and the bytes one rank sends for them (`sent_per_rank`)."""
    out: dict[str, dict[str, float]] = {}
    for kind, group, nbytes in calls:
        row = out.setdefault(kind, {"calls": 0, "sent": 0.0})
        row["calls"] += 1
        row["sent"] += sent_per_rank(kind, group, nbytes)
    return dict(sorted(out.items()))


# ------------------------------------------------------------------------------------------ layouts
def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _held(model: nn.Module, state: dict[Any, dict[str, Any]]) -> dict[str, int]:
    params = list(model.parameters())
    optim = [v for s in state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {
        "parameters": sum(_nbytes(_local(p)) for p in params),
        "gradients": sum(_nbytes(_local(p.grad)) for p in params if p.grad is not None),
        "optimizer": sum(_nbytes(_local(v)) for v in optim if v.dim() > 0),
        "optimizer 0-d": sum(_nbytes(_local(v)) for v in optim if v.dim() == 0),
    }


def _tp_plan() -> dict[str, Any]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return {"up": ColwiseParallel(), "down": RowwiseParallel()}


def _shard(model: nn.Sequential, layout: str, mesh: Any) -> nn.Module:
    """Apply `layout` to a model on meta (FSDP and TP change its parameters into sharded DTensors)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    if layout.startswith("FSDP") and layout != "FSDP x TP" or layout == "HSDP":
        reshard = {"FSDP no reshard": False, "FSDP reshard to 8": RESHARD_TO}.get(layout, True)
        policy = MixedPrecisionPolicy(torch.bfloat16, torch.float32) if layout == MIXED else MixedPrecisionPolicy()
        for block in model:
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
    elif layout == "TP":
        for block in model:
            parallelize_module(block, mesh, _tp_plan())
    elif layout == "FSDP x TP":
        for block in model:
            parallelize_module(block, mesh["tp"], _tp_plan())
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return model


def _init_weights(model: nn.Module) -> None:
    """Each rank initialises its own shards (`reset_parameters` on a DTensor draws only the local part).

    On a CPU mesh DTensor has no generator it can keep in step across ranks (`is_rng_supported_mesh`), so
    it warns that its random operators "may not have complete support", once per op, and each rank
    draws its shards from its own generator. That is all this chapter needs (it counts bytes and
    collectives, never compares values), so the warning is silenced here: from real ranks it went
    straight to the terminal that runs JupyterLab."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="DTensor random operators may not have complete support")
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()


def one_step(
    rank: int,
    world_size: int,
    layout: str = "FSDP",
    hidden: int = SMALL["hidden"],
    layers: int = SMALL["layers"],
    batch: int = SMALL["batch"],
    fake: bool = False,
    pp: int = 1,
) -> dict[str, Any]:
    """Rank `rank` of the group that is initialised now (real or fake) runs one Adam step of
    `make_model(hidden, layers)` under `layout`: built on meta, sharded, materialised with `to_empty` and
    initialised per shard, then forward, backward and step; with `fake`, on tensors without storage.
    Returns the bytes the rank holds afterwards (`_held`), the collectives of the step
    (`CollectiveLog.calls`), the mesh and the rank's coordinate in it. DDP's gradients are all-reduced by
    hand, one tensor at a time (the DDP wrapper's C++ reducer cannot run on fake tensors; the bytes are
    DDP's, the number of calls is not: DDP packs them into ~25 MB buckets).

    With `pp` > 1 the mesh gets a first dimension of `pp` pipeline stages (`mesh_dims`): the rank builds
    only its stage's layers // pp blocks, applies the layout over its stage's ranks, and the stages pass
    the boundary's activations forward and their gradients back with `dist.send` / `dist.recv`, by hand,
    in one micro-batch (micro-batches split the same bytes into more messages)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh

    dims = mesh_dims(layout, world_size, pp)
    names = ("dp", "tp") if layout == "FSDP x TP" else ("replicate", "shard") if layout == "HSDP" else ("world",)
    if pp > 1 and positive_int("layers", layers) % pp:
        raise ValueError(f"pp must divide layers ({layers}), got {pp}")
    # the mesh and the sharding are set up on real and meta tensors; only the step runs on fake ones
    root = init_device_mesh("cpu", dims, mesh_dim_names=("pp", *names) if pp > 1 else names)
    mesh = root[names] if pp > 1 else root  # this stage's ranks
    model = _shard(make_model(hidden, layers // pp), layout, mesh)
    coordinate = root.get_coordinate()
    pipe = _Boundary(root, pp, batch, hidden, torch.bfloat16 if layout == MIXED else torch.float32)
    with FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext():
        out = _train_one_step(model, layout, hidden, batch, mesh, pipe)
    out.update(mesh=dims, coordinate=coordinate)
    return out


class _Boundary:
    """A pipeline stage's neighbours (the ranks of the same coordinate in the previous and the next stage)
    and the shape and dtype of the activations that cross the boundary; with one stage, no neighbours."""

    def __init__(self, root: Any, pp: int, batch: int, hidden: int, dtype: torch.dtype) -> None:
        import torch.distributed as dist

        self.stage = root.get_coordinate()[0] if pp > 1 else 0
        ranks = dist.get_process_group_ranks(root.get_group("pp")) if pp > 1 else [0]
        self.prev = ranks[self.stage - 1] if self.stage > 0 else None
        self.next = ranks[self.stage + 1] if self.stage < pp - 1 else None
        self.shape, self.dtype = (batch, hidden), dtype

    def input(self) -> torch.Tensor:
        """The stage's input: the data on the first stage, else the previous stage's output, received."""
        import torch.distributed as dist

        if self.prev is None:
            return torch.randn(self.shape)
        x = torch.empty(self.shape, dtype=self.dtype)
        dist.recv(x, self.prev)
        return x.requires_grad_()

    def backward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """The last stage's loss backward; the others send y forward and run backward from the gradient
        the next stage sends back; every stage but the first sends its input's gradient back."""
        import torch.distributed as dist

        if self.next is None:
            y.float().square().mean().backward()
        else:
            dist.send(y.detach(), self.next)
            grad = torch.empty_like(y)
            dist.recv(grad, self.next)
            y.backward(grad)
        if self.prev is not None:
            dist.send(x.grad, self.prev)


def _train_one_step(
    model: nn.Module, layout: str, hidden: int, batch: int, mesh: Any, pipe: _Boundary
) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    model.to_empty(device="cpu")
    _init_weights(model)
    group = mesh.get_group() if mesh.ndim == 1 else None  # DDP's and ZeRO-1's group: this stage's ranks
    if layout == "ZeRO-1":
        optimizer = ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3, process_group=group
        )
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    log = CollectiveLog()
    with log:
        x = pipe.input()
        y = model(x)
        pipe.backward(x, y)
        if layout in ("DDP", "ZeRO-1"):
            for p in model.parameters():
                dist.all_reduce(p.grad, group=group)
        optimizer.step()
    state = optimizer.optim.state if layout == "ZeRO-1" else optimizer.state
    first = next(model.parameters())
    dtypes = {"parameter shard": first.dtype, "gradient shard": first.grad.dtype, "block output": y.dtype}
    out = {"held": _held(model, state), "calls": log.calls, "machines": log.machines}
    out["dtypes"] = {k: str(v) for k, v in dtypes.items()}
    del optimizer, model
    if layout == "ZeRO-1":
        gc.collect()  # a ZeroRedundancyOptimizer alive at destroy_process_group was seen to abort (chapter 07)
    return out


def simulate(
    layout: str,
    world_size: int,
    rank: int = 3,
    hidden: int = MODEL["hidden"],
    layers: int = MODEL["layers"],
    batch: int = MODEL["batch"],
    pp: int = 1,
) -> dict[str, Any]:
    """`one_step` as rank `rank` of a fake `world_size`-rank job, on fake tensors: any size, no memory."""
    with fake_group(rank, world_size):
        return one_step(rank, world_size, layout, hidden, layers, batch, fake=True, pp=pp)


def real_rank(
    rank: int, world_size: int, hidden: int = SMALL["hidden"], layers: int = SMALL["layers"]
) -> dict[str, Any]:
    """Every 1-D layout's `one_step` on real tensors in a real gloo group (launched by `launch`)."""
    return {layout: one_step(rank, world_size, layout, hidden, layers) for layout in ONE_D}


# ------------------------------------------------------------------------------------------ formulas
def _psi(hidden: int, layers: int) -> dict[str, int]:
    """Bytes (fp32) of all parameters, and of the part tensor parallelism leaves whole: the row-wise
    layer's bias (`down.bias`, added once after the all-reduce, so every TP rank holds all of it)."""
    whole = 4 * parameter_count(hidden, layers)
    replicated = 4 * hidden * layers
    return {"psi": whole, "replicated": replicated, "split": whole - replicated}


def _stage(layout: str, world_size: int, layers: int, pp: int) -> tuple[int, int]:
    """The ranks and the layers of one pipeline stage, after checking that `pp` divides both."""
    mesh_dims(layout, world_size, pp)
    if positive_int("layers", layers) % pp:
        raise ValueError(f"pp must divide layers ({layers}), got {pp}")
    return world_size // pp, layers // pp


def held_formula(
    layout: str, world_size: int, hidden: int = MODEL["hidden"], layers: int = MODEL["layers"], pp: int = 1
) -> dict[str, float]:
    """Bytes of parameters, gradients and (Adam's two moments) optimizer state per rank by the ZeRO
    paper's formulas, written for fp32 (psi = 4 bytes x parameters here, where the paper's psi counts
    parameters; n ranks): DDP psi, psi, 2 psi; ZeRO-1 psi, psi,
    2 psi / n; FSDP (ZeRO-3) psi / n each (its reshard variants differ only during a step); tensor
    parallelism over t ranks splits all but the row-wise bias: split / t + bias; FSDP x TP shards that
    again over dp; HSDP shards over its second mesh dimension and replicates over the first. With `pp`
    pipeline stages a rank holds only its stage's layers / pp blocks, laid out over its stage's n / pp
    ranks."""
    world_size, layers = _stage(layout, world_size, layers, pp)
    dims = mesh_dims(layout, world_size)
    b = _psi(hidden, layers)
    psi, n = b["psi"], dims[0]
    if layout == "DDP":
        share, optim = psi, 2 * psi
    elif layout == "ZeRO-1":
        share, optim = psi, 2 * psi / n
    else:
        if layout == "TP":
            share = b["split"] / n + b["replicated"]
        elif layout == "FSDP x TP":
            share = (b["split"] / dims[1] + b["replicated"]) / dims[0]
        elif layout == "HSDP":
            share = psi / dims[1]
        else:
            share = psi / n
        optim = 2 * share
    return {"parameters": share, "gradients": share, "optimizer": optim}


def activation_bytes(hidden: int = MODEL["hidden"], batch: int = MODEL["batch"]) -> int:
    """Bytes of one block's input or output (fp32): what tensor parallelism all-reduces."""
    return 4 * positive_int("hidden", hidden) * positive_int("batch", batch)


def sent_formula(
    layout: str,
    world_size: int,
    hidden: int = MODEL["hidden"],
    layers: int = MODEL["layers"],
    batch: int = MODEL["batch"],
    pp: int = 1,
    stage: int | None = None,
) -> float:
    """Bytes one rank sends in one step by the formulas (ring algorithms, fp32): an all-reduce of B over
    g ranks sends 2 B (g - 1) / g, an all-gather or reduce-scatter B (g - 1) / g. DDP 2 psi (n - 1) / n;
    torch's ZeRO-1 the same plus a broadcast of the parameters (psi, charged to every rank); FSDP
    3 psi (n - 1) / n (gather in forward, again in backward, reduce-scatter the gradients), 2 psi (n - 1) / n
    without resharding; resharding to 8 gathers the backward's copy within 8 ranks; TP all-reduces a
    block's activations A in each forward and in each backward but the first block's: (2 L - 1) 2 A (t - 1) / t;
    FSDP x TP: FSDP's 3 x over dp of a TP rank's bytes, plus TP's; HSDP: FSDP's 3 x over the shard
    group, plus an all-reduce of the gradient shard over the replicas.

    With `pp` pipeline stages, a rank of stage `stage` sends its layout's bytes for its stage's layers / pp
    blocks over the stage's n / pp ranks, plus the boundary's activations (A, bf16 under `MIXED`) to the
    next stage and their gradient (A) back to the previous one; a stage after the first also all-reduces
    its input's gradient under TP (2 L instead of 2 L - 1). `stage=None`: the busiest stage's rank."""
    world_size, layers = _stage(layout, world_size, layers, pp)
    if stage is None:
        return max(sent_formula(layout, world_size * pp, hidden, layers * pp, batch, pp, s) for s in range(pp))
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < pp:
        raise ValueError(f"stage must be an int in [0, pp) = [0, {pp}), got {stage!r}")
    boundary = activation_bytes(hidden, batch) // (2 if layout == MIXED else 1)
    return _sent_in_stage(layout, world_size, hidden, layers, batch, first=stage == 0) + boundary * (
        (stage < pp - 1) + (stage > 0)
    )


def _sent_in_stage(layout: str, world_size: int, hidden: int, layers: int, batch: int, first: bool) -> float:
    """`sent_formula`'s layouts over the ranks of one stage; `first`: the stage's input needs no gradient."""
    dims = mesh_dims(layout, world_size)
    b = _psi(hidden, layers)
    psi, n = b["psi"], dims[0]

    def ring(g: int) -> float:
        return (g - 1) / g

    def tp(t: int) -> float:
        return (2 * layers - first) * 2 * activation_bytes(hidden, batch) * ring(t)

    if layout == "DDP":
        return 2 * psi * ring(n)
    if layout == "ZeRO-1":
        return 2 * psi * ring(n) + (psi if n > 1 else 0)
    if layout == "FSDP":
        return 3 * psi * ring(n)
    if layout == "FSDP no reshard":
        return 2 * psi * ring(n)
    if layout == MIXED:  # the gathers move bf16 (half of psi), the reduce-scatter fp32 (reduce_dtype)
        return 2 * (psi / 2) * ring(n) + psi * ring(n)
    if layout == "FSDP reshard to 8":
        return 2 * psi * ring(n) + psi * ring(min(RESHARD_TO, n))
    if layout == "TP":
        return tp(n)
    if layout == "FSDP x TP":
        return 3 * (b["split"] / dims[1] + b["replicated"]) * ring(dims[0]) + tp(dims[1])
    return 3 * psi * ring(dims[1]) + 2 * (psi / dims[1]) * ring(dims[0])  # HSDP


def calculator(
    layout: str,
    world_size: int,
    hidden: int = MODEL["hidden"],
    layers: int = MODEL["layers"],
    batch: int = MODEL["batch"],
    device_gib: float = 80.0,
    pp: int = 1,
) -> dict[str, Any]:
    """Memory per rank and bytes sent per step for any size, at once, from `held_formula` and
    `sent_formula` (tests/test_scale.py checks those against the simulation on a grid of layouts, sizes
    and pipeline degrees). `batch` counts the tokens of a step (batch x sequence length) on each
    data-parallel replica: tensor parallelism's all-reduces and the pipeline's sends depend on it. `pp`
    pipeline stages: the layout runs over each stage's n / pp ranks; the bytes are the busiest stage's.
    Activations are not counted (they depend on checkpointing and on the pipeline's schedule)."""
    held = held_formula(layout, world_size, hidden, layers, pp)
    state = held["parameters"] + held["gradients"] + held["optimizer"]
    return {
        "parameters": parameter_count(hidden, layers),
        "state GiB per rank": state / 2**30,
        "sent GiB per step": sent_formula(layout, world_size, hidden, layers, batch, pp) / 2**30,
        "fits": state <= device_gib * 2**30,
    }


# ----------------------------------------------------------------------------------------- checks
def pinned_internals() -> dict[str, bool]:
    """What this chapter relies on from torch's internal modules, so a test notices when it moves."""
    import torch.distributed as dist

    found = {}
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: F401

        found["torch.testing._internal.distributed.fake_pg.FakeStore"] = True
    except ImportError:
        found["torch.testing._internal.distributed.fake_pg.FakeStore"] = False
    found['backend "fake" registered'] = "fake" in dist.Backend.backend_list
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily  # noqa: F401

        found["torch._subclasses.fake_tensor.FakeTensorMode"] = True
    except ImportError:
        found["torch._subclasses.fake_tensor.FakeTensorMode"] = False
    # `fake_group` clears DTensor's sharding caches with it after each simulation (see _clear_dtensor_caches)
    found["torch._C._clear_DTensor_sharding_propagator_cache"] = hasattr(
        torch._C, "_clear_DTensor_sharding_propagator_cache"
    )
    return found


def simulation_vs_real(
    real: dict[int, dict[str, Any]], hidden: int = SMALL["hidden"], layers: int = SMALL["layers"]
) -> dict[str, dict[str, bool]]:
    """For each 1-D layout, the simulation at world size 2 (rank 0 and rank 1) against the real 2-rank run:
    the same bytes held, and the same collectives (kind, group, bytes) in the same order."""
    out = {}
    for layout in ONE_D:
        same_held, same_calls = True, True
        for rank in (0, 1):
            sim = simulate(layout, 2, rank=rank, hidden=hidden, layers=layers, batch=SMALL["batch"])
            same_held &= sim["held"] == real[rank]["real_rank"][layout]["held"]
            same_calls &= sim["calls"] == real[rank]["real_rank"][layout]["calls"]
        out[layout] = {"held": same_held, "collectives": same_calls}
    return out


# ---------------------------------------------------------------------------------------- bench figure
def _totals(run: dict[str, Any]) -> tuple[int, float]:
    held = run["held"]
    return (held["parameters"] + held["gradients"] + held["optimizer"],
            sum(row["sent"] for row in by_kind(run["calls"]).values()))  # fmt: skip


def sim_over_real_bytes() -> Any:
    """Bytes per rank in the simulation at world size 2 / bytes per rank in a real 2-rank gloo run, for
    every layout that runs on 2 real ranks, held (parameters, gradients, Adam state) and sent in one step;
    the ratio farthest from 1 of them (limit 1: the simulation is exact)."""
    from helpers import model_parallel
    from helpers.timing import Figure

    real = model_parallel.launch([real_rank], 2)
    ratios = {}
    for layout in ONE_D:
        for rank in (0, 1):
            sim_held, sim_sent = _totals(
                simulate(layout, 2, rank=rank, hidden=SMALL["hidden"], layers=SMALL["layers"], batch=SMALL["batch"])
            )
            real_held, real_sent = _totals(real[rank]["real_rank"][layout])
            ratios[f"{layout} rank {rank} held"] = sim_held / real_held
            ratios[f"{layout} rank {rank} sent"] = sim_sent / real_sent if real_sent else float(sim_sent == 0)
    worst = max(ratios.values(), key=lambda r: abs(r - 1))
    return Figure(
        ratio=worst,
        limit=1.0,
        what="simulated bytes per rank (fake group, world size 2) / a real 2-rank gloo run's, held and sent, "
        f"worst of {len(ratios)} (layouts {', '.join(ONE_D)})",
        details={"ratios": ratios},
        conditions={"every ratio is 1": all(r == 1 for r in ratios.values())},
        timed=False,
    )


# --------------------------------------------------------------------------------- bytes to seconds
SWEEP = tuple(4**k for k in range(5, 12))  # all-reduce sizes in bytes, 1 KiB .. 4 MiB


def allreduce_sweep(rank: int, world_size: int, sizes: tuple[int, ...] = SWEEP, repeats: int = 7) -> dict[int, float]:
    """Seconds of `dist.all_reduce` of a float32 tensor of each size in `sizes` (bytes), the best of
    `repeats` calls each started on a barrier (the least disturbed by other programs), after one warm-up
    call (launched on real ranks by `launch`)."""
    import time

    import torch.distributed as dist

    repeats = positive_int("repeats", repeats)
    out = {}
    for nbytes in sizes:
        t = torch.zeros(positive_int("sizes[i]", nbytes) // 4)
        dist.all_reduce(t)
        times = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - start)
        out[nbytes] = min(times)
    return out


def fit_allreduce(times: dict[int, float], world_size: int = 2) -> dict[str, Any]:
    """Fit t = latency + sent / bandwidth, sent = 2 (n - 1) / n x bytes (the ring), on every other size of
    `times` (the 1st, 3rd, ...), minimising the relative error; predict the sizes left out. Returns the
    latency (s: the call's whole fixed cost, all of its ring's 2 (n - 1) steps, as one number fitted at this
    one n), the bandwidth (bytes/s), and per size the prediction over the measurement."""
    import numpy as np

    if not isinstance(times, dict) or len(times) < 4:
        raise ValueError("times must map at least 4 sizes (bytes) to seconds")
    sizes = sorted(times)
    fit, held_out = sizes[::2], sizes[1::2]
    ring = 2 * (positive_int("world_size", world_size, minimum=2) - 1) / world_size
    a = np.array([[1 / times[s], ring * s / times[s]] for s in fit])
    latency, per_byte = np.linalg.lstsq(a, np.ones(len(fit)), rcond=None)[0]

    def predict(s: int) -> float:
        return float(latency + per_byte * ring * s)

    return {
        "latency": float(latency),
        "bandwidth": float(1 / per_byte) if per_byte > 0 else float("inf"),
        "fitted": {s: predict(s) / times[s] for s in fit},
        "left out": {s: predict(s) / times[s] for s in held_out},
    }


def allreduce_model() -> Any:
    """The latency-bandwidth model of a ring all-reduce fitted on 2 real gloo ranks: predicted seconds /
    measured seconds on the sizes left out of the fit, the median (1 is a perfect model; no physical limit:
    a prediction can err either way)."""
    import statistics

    from helpers import model_parallel
    from helpers.timing import Figure

    times = model_parallel.launch([allreduce_sweep], 2)[0]["allreduce_sweep"]
    fit = fit_allreduce(times, 2)
    ratios = list(fit["left out"].values())
    return Figure(
        ratio=statistics.median(ratios),
        limit=None,  # a model's error, not a speed-up: 1 is a perfect prediction, and either side is off
        what="predicted / measured seconds of dist.all_reduce on 2 gloo ranks, sizes left out of the "
        "latency-bandwidth fit (median; 1 = a perfect model, each size's ratio in the details)",
        details={
            "latency_us": fit["latency"] * 1e6,
            "bandwidth_GBps": fit["bandwidth"] / 1e9,
            "left_out": fit["left out"],
        },
    )


# Stated assumptions about a GPU cluster, not measurements: the model's inputs. Sources in the notebook.
CLUSTER = {
    "inside bytes/s": 450e9,  # NVLink 4 on an H100 SXM: 900 GB/s for both directions together (NVIDIA H100 datasheet)
    "across bytes/s": 50e9,  # one 400 Gb/s InfiniBand NDR adapter per GPU, as in a DGX H100 (DGX H100 datasheet)
    "inside latency s": 3e-6,  # per step of a ring inside a machine: an assumed order of magnitude
    "across latency s": 10e-6,  # per step of a ring across machines: an assumed order of magnitude
    "FLOP/s": 989e12,  # H100 SXM, dense bf16 (NVIDIA H100 datasheet)
    "MFU": 0.4,  # the share of that peak a training step reaches: assumed
}


def step_seconds(
    run: dict[str, Any], layout: str, world_size: int, cluster: dict[str, float] = CLUSTER,
    hidden: int = MODEL["hidden"], layers: int = MODEL["layers"], batch: int = MODEL["batch"],
) -> dict[str, float]:  # fmt: skip
    """A prediction, not a measurement: seconds of one rank's communication in the step `run` logged
    (`simulate`), each collective as a ring of (g - 1) steps (all-reduce 2 (g - 1)) paying a latency each
    plus its bytes over the slowest link it crosses (inside one machine of 8 or across machines), with no
    overlap; and seconds of compute, 6 x parameters x tokens FLOPs (forward and backward) divided over
    the ranks that split a layer (tensor parallelism), at `cluster`'s FLOP/s x MFU."""
    comm = 0.0
    for (kind, group, nbytes), machines in zip(run["calls"], run["machines"], strict=True):
        if group == 1:
            continue
        where = "inside" if machines == 1 else "across"
        steps = 2 * (group - 1) if kind == "all-reduce" else group - 1
        comm += steps * cluster[f"{where} latency s"] + sent_per_rank(kind, group, nbytes) / cluster[f"{where} bytes/s"]
    split = {"TP": world_size, "FSDP x TP": TP}.get(layout, 1)
    flops = 6 * parameter_count(hidden, layers) * batch / split
    return {"communication": comm, "compute": flops / (cluster["FLOP/s"] * cluster["MFU"])}


# -------------------------------------------------------------------------------- pretrained weights
def pretrained(
    rank: int, world_size: int, hidden: int = SMALL["hidden"], layers: int = SMALL["layers"]
) -> dict[str, Any]:
    """How trained weights reach the shards of a model built on meta: rank 0 holds the whole state dict
    (here a seeded model stands in for a file it read), every rank builds the model on meta, shards it and
    allocates only its shards (`to_empty`); `set_model_state_dict(..., full_state_dict=True,
    broadcast_from_rank0=True)` sends each tensor from rank 0 and keeps each rank's slice. Then one
    backward and `clip_grad_norm_` over the shards, against one process with the whole model. Returns
    whether each gathered weight equals rank 0's, this rank's bytes against the whole, and both norms."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    whole = make_model(hidden, layers, device="cpu")  # "pretrained": what rank 0 loaded from disk
    reference = {k: v.detach().clone() for k, v in whole.state_dict().items()}
    mesh = init_device_mesh("cpu", (world_size,))
    model = make_model(hidden, layers)  # on meta: nothing allocated
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")  # only this rank's shards, uninitialised
    # rank 0 passes the whole state dict (a copy: the call replaces its values by DTensors), the others none
    state = {k: v.clone() for k, v in reference.items()} if rank == 0 else {}
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    equal = all(torch.equal(p.full_tensor().detach(), reference[k]) for k, p in model.named_parameters())
    x = torch.randn(8, hidden, generator=torch.Generator().manual_seed(1))
    model(x).square().mean().backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    whole(x).square().mean().backward()
    whole_norm = nn.utils.clip_grad_norm_(whole.parameters(), max_norm=1.0)
    return {
        "weights equal rank 0's": equal,
        "bytes here": sum(_nbytes(_local(p)) for p in model.parameters()),
        "bytes whole": sum(_nbytes(v) for v in reference.values()),
        "norm type": type(norm).__name__,
        "norm": float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm),
        "one process's norm": float(whole_norm),
    }


# ------------------------------------------------------------------------------ activation checkpointing
def checkpointing(hidden: int = 256, layers: int = 4, batch: int = 64) -> dict[str, Any]:
    """Bytes of activations autograd keeps from the forward to the backward of `make_model(hidden,
    layers)` on real tensors, without and with `torch.utils.checkpoint` around each block (counted with
    chapter 09's `ActivationMeter`), the formulas (a block keeps its input and its ReLU's 4x wider output;
    checkpointed, only its input), and whether the gradients are the same."""
    from torch.utils.checkpoint import checkpoint

    from helpers.model_parallel import ActivationMeter

    model = make_model(hidden, layers, device="cpu")
    x = torch.randn(positive_int("batch", batch), hidden, generator=torch.Generator().manual_seed(1))
    kept, grads = {}, {}
    for name, wrap in (("plain", False), ("checkpointed", True)):
        meter = ActivationMeter(list(model.parameters()))
        with meter.hooks():
            h = x
            for block in model:
                h = checkpoint(block, h, use_reentrant=False) if wrap else block(h)
            kept[name] = meter.live
        h.square().mean().backward()
        grads[name] = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
    one = 4 * batch * hidden  # fp32 bytes of one block's input
    return {
        "kept": kept,
        "formula": {"plain": layers * (one + 4 * one), "checkpointed": layers * one},
        "same gradients": all(torch.equal(a, b) for a, b in zip(grads["plain"], grads["checkpointed"], strict=True)),
    }


# ---------------------------------------------------------------------------------- pipeline stages
def pipeline_clip(
    rank: int,
    world_size: int,
    hidden: int = SMALL["hidden"],
    layers: int = SMALL["layers"],
    microbatches: int = 2,
    max_norm: float = 0.01,
) -> dict[str, Any]:
    """A real pipeline (`torch.distributed.pipelining`, `ScheduleGPipe`) of `make_model(hidden, layers)`
    cut into `world_size` stages, one per rank (launched by `launch`): what this stage holds, what it
    sends in a step (logged by `CollectiveLog`, after a first step that also exchanged the shapes), and
    gradient clipping across stages. `clip_grad_norm_` on one
    stage's parameters sees only that stage's norm; the global norm is the square root of the sum of the
    stages' squared norms (an all-reduce over the pipeline's ranks), applied with `clip_grads_with_norm_`.
    Compared with one process that holds the whole model and calls `clip_grad_norm_` on it."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

    per = layers // world_size
    if per * world_size != positive_int("layers", layers):
        raise ValueError(f"world_size ({world_size}) must divide layers ({layers})")
    torch.manual_seed(0)
    whole = make_model(hidden, layers, device="cpu")
    mine = list(whole)[rank * per : (rank + 1) * per]
    stage_module = nn.Sequential(*[Block(hidden) for _ in mine])
    stage_module.load_state_dict(nn.Sequential(*mine).state_dict())  # a copy: `whole` stays the reference
    x = torch.randn(4 * microbatches, hidden, generator=torch.Generator().manual_seed(1))
    target = torch.zeros(4 * microbatches, hidden)
    stage = PipelineStage(stage_module, rank, world_size, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=microbatches, loss_fn=nn.functional.mse_loss)
    log = CollectiveLog()
    for logged in (False, True):  # the first step also sends the shapes between the stages: not logged
        stage_module.zero_grad(set_to_none=True)
        with log if logged else contextlib.nullcontext():
            if rank == 0:
                schedule.step(x)
            elif rank == world_size - 1:
                schedule.step(target=target)
            else:
                schedule.step()
    params = list(stage_module.parameters())
    stage_norm = nn.utils.get_total_norm([p.grad for p in params])  # what this stage alone would clip by
    squared = stage_norm**2
    dist.all_reduce(squared)  # the sum over the stages
    norm = squared.sqrt()
    nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    # one process with the whole model, the whole batch, and clip_grad_norm_
    nn.functional.mse_loss(whole(x), target).backward()
    whole_norm = nn.utils.clip_grad_norm_(whole.parameters(), max_norm)
    reference = [p.grad for block in mine for p in block.parameters()]
    sends = by_kind(log.calls).get("send", {"calls": 0, "sent": 0.0})
    return {
        "parameters here": sum(p.numel() for p in params),
        "parameters whole": sum(p.numel() for p in whole.parameters()),
        "stage norm": float(stage_norm),
        "combined norm": float(norm),
        "one process's norm": float(whole_norm),
        "clipped gradients equal (1e-6)": all(
            torch.allclose(p.grad, r, rtol=0, atol=1e-6) for p, r in zip(params, reference, strict=True)
        ),
        "sends": sends["calls"],
        "sent": sends["sent"],
        "boundary bytes": activation_bytes(hidden, 4 * microbatches),
    }


# ------------------------------------------------------------------------------------------ offload
def offload(
    world_size: int = 8, rank: int = 3, hidden: int = SMALL["hidden"], layers: int = SMALL["layers"]
) -> dict[str, Any]:
    """FSDP2's `CPUOffloadPolicy` on this machine, as rank `rank` of a fake `world_size`-rank job, real
    tensors (a small model). The default policy pins the shards' host memory (`pin_memory=True`), which
    needs an accelerator: its error, if any. With `pin_memory=False`: one Adam step, then the device of
    the parameter shards, their gradients and Adam's state, whether any is pinned, and the bytes held
    against the same step without offload."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    def step(policy: Any) -> dict[str, Any]:
        with fake_group(rank, world_size):
            mesh = init_device_mesh("cpu", (world_size,))
            model = make_model(hidden, layers)
            for block in model:
                fully_shard(block, mesh=mesh, offload_policy=policy)
            fully_shard(model, mesh=mesh, offload_policy=policy)
            model.to_empty(device="cpu")
            _init_weights(model)
            optimizer = torch.optim.Adam(model.parameters())
            model(torch.randn(SMALL["batch"], hidden)).square().mean().backward()
            optimizer.step()
            params = list(model.parameters())
            state = [v for p in params for v in optimizer.state[p].values() if v.dim() > 0]
            tensors = {
                "parameter shards": [_local(p) for p in params],
                "gradient shards": [_local(p.grad) for p in params],
                "Adam's state": [_local(v) for v in state],
            }
            return {
                "devices": {k: sorted({str(t.device) for t in ts}) for k, ts in tensors.items()},
                "pinned": any(t.is_pinned() for ts in tensors.values() for t in ts),
                "held": _held(model, optimizer.state),
            }

    try:
        step(CPUOffloadPolicy())
        default_error = None
    except RuntimeError as e:
        default_error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1]}"
    out = step(CPUOffloadPolicy(pin_memory=False))
    out["default policy's error"] = default_error
    out["held without offload"] = step(OffloadPolicy())["held"]
    out["accelerator"] = torch.accelerator.is_available()
    return out
