"""A dry run of your own layout at scale on one CPU: what rank R of an N-rank FSDP job holds after one step.

Run:  python examples/10_dry_run.py --world-size 1024 --rank 3 --hidden 8192 --layers 4

One process becomes rank R of an N-rank job with the "fake" process group (its collectives return at once
and move nothing), the model is built on the meta device, sharded with fully_shard, and materialised on
fake tensors (shapes, no memory), so any size runs. The bytes printed are real; the values are not.
`torch.testing._internal` and `torch._subclasses` are internal to torch: pin what you rely on in a test.
Swap `shard` for your own layout (parallelize_module, a 2-D mesh, MixedPrecisionPolicy, ...).
"""

from __future__ import annotations

import argparse
import warnings

import torch
import torch.distributed as dist
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore


def make_model(hidden: int, layers: int) -> nn.Sequential:
    """Transformer MLP blocks, hidden -> 4 x hidden -> hidden, on meta: shapes only."""
    with torch.device("meta"):
        return nn.Sequential(
            *[
                nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.ReLU(), nn.Linear(4 * hidden, hidden))
                for _ in range(layers)
            ]
        )


def shard(model: nn.Sequential, mesh) -> nn.Module:  # noqa: ANN001 - a DeviceMesh
    for block in model:
        fully_shard(block, mesh=mesh)  # each block gathered just before it runs
    return fully_shard(model, mesh=mesh)


def local_bytes(tensors) -> int:  # noqa: ANN001 - an iterable of (D)Tensors
    return sum(t.to_local().numel() * t.element_size() if hasattr(t, "to_local") else t.numel() * t.element_size()
               for t in tensors if t is not None)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=1024)
    parser.add_argument("--rank", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=8, help="tokens of one step on this rank")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", module="torch")

    dist.init_process_group("fake", rank=args.rank, world_size=args.world_size, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (args.world_size,))  # outside FakeTensorMode: it makes real tensors
        model = shard(make_model(args.hidden, args.layers), mesh)
        whole = 4 * sum(p.numel() for p in model.parameters())  # a DTensor's numel is the whole tensor's
        with FakeTensorMode(allow_non_fake_inputs=True):
            model.to_empty(device="cpu")
            optimizer = torch.optim.Adam(model.parameters())
            model(torch.randn(args.tokens, args.hidden)).square().mean().backward()
            optimizer.step()
            params = list(model.parameters())
            held = {
                "parameters": local_bytes(params),
                "gradients": local_bytes(p.grad for p in params),
                "Adam state": local_bytes(v for s in optimizer.state.values() for v in s.values() if v.dim() > 0),
            }
    finally:
        dist.destroy_process_group()
    print(f"model: {whole // 4:,} parameters, {whole / 2**30:.2f} GiB in fp32")
    for name, nbytes in held.items():
        print(f"rank {args.rank} of {args.world_size} holds {nbytes:,} bytes of {name}")
    print(f"parameters held x world size == the whole model: {held['parameters'] * args.world_size == whole}")


if __name__ == "__main__":
    main()
