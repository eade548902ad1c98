"""Chapter 07's pictures: DDP's gradient buckets overlapping the backward pass (and what `no_sync` skips),
torchrun restarting a group from a snapshot, and the path of a preemption signal to the ranks."""

from __future__ import annotations

from helpers.diagrams import animation, figure
from helpers.diagrams.style import FONT, arrow, box, canvas, lane, legend, note

__all__ = ["buckets_overlap", "torchrun_attempts", "signal_path"]

_LAYERS = ["layer 4", "layer 3", "layer 2", "layer 1"]  # backward runs from the last layer to the first


@animation(
    "07-ddp-buckets",
    alt="DDP's backward pass computes gradients from the last layer to the first; each bucket is all-reduced "
    "as soon as its gradients are ready, while backward goes on; inside no_sync nothing is all-reduced",
    steps=4,
)
def buckets_overlap(step: int):
    """Step 0-2: a synchronising backward, buckets all-reduced as they fill. Step 3: inside no_sync."""
    fig, ax = canvas(8, 3.4)
    x0, w = 1.9, 1.05
    in_no_sync = step == 3
    lane(ax, 2.15, 0.6, "backward\n(autograd)", x0, 7.8, "thread")
    lane(ax, 1.15, 0.6, "all-reduce\n(to the\nother ranks)", x0, 7.8, "message")
    done = 4 if in_no_sync else (2, 3, 4)[step]
    for i, name in enumerate(_LAYERS):
        kind = "data" if i < done else "idle"
        box(ax, x0 + i * w, 2.2, w - 0.1, 0.5, f"grad {name}", kind, size=FONT - 2)
    for label, first in (("bucket 1\nlayers 4, 3", 0), ("bucket 2\nlayers 2, 1", 2)):
        start = x0 + (first + 2) * w
        if not in_no_sync and done >= first + 2:
            box(ax, start, 1.2, 1.6, 0.5, label, "message", size=FONT - 2)
            arrow(ax, (start - 0.12, 2.2), (start + 0.1, 1.72), "", "message")
    if in_no_sync:
        box(ax, x0, 1.2, 4 * w - 0.1, 0.5, "nothing sent: .grad only adds up", "idle", size=FONT - 1, dashed=True)
    captions = [
        "backward reaches layers 4 and 3: bucket 1 is full,\nits all-reduce starts at once",
        "while bucket 1 travels, backward goes on\nwith layers 2 and 1: the overlap",
        "bucket 2 is full: its all-reduce starts;\nbackward returns when both are done",
        "inside ddp.no_sync(): the same backward, no all-reduce;\nthe next backward outside it sends the sum",
    ]
    note(ax, 4.0, 3.0, captions[step], size=FONT, weight="bold")
    note(ax, 1.9, 0.55, "time →", ha="left", size=FONT - 1)
    legend(ax, 3.2, 0.55, [("data", "gradient ready"), ("idle", "not yet"), ("message", "all-reduce")])
    return fig


@figure(
    "07-torchrun-attempts",
    alt="torchrun's agent holds the store and starts two ranks; rank 1 is killed in epoch 2; the agent stops "
    "rank 0 and starts a second attempt, whose ranks meet under their own prefix and load the snapshot "
    "that rank 0 wrote after epoch 1",
)
def torchrun_attempts():
    fig, ax = canvas(8, 4.2)
    box(ax, 0.2, 0.3, 1.9, 3.6, "torchrun agent", "system", align="top", weight="bold")
    box(ax, 0.4, 2.3, 1.5, 0.9, "store\nattempt0/ …\nattempt1/ …", "system", size=FONT - 1)
    note(ax, 1.15, 1.3, "--max-restarts=1\nrestarts the\nwhole group", size=FONT - 1)
    # attempt 0
    box(ax, 2.5, 2.4, 2.4, 1.5, "attempt 0", "idle", align="top", dashed=True)
    box(ax, 2.65, 2.95, 1.0, 0.5, "rank 0", "process", size=FONT - 1)
    box(ax, 3.75, 2.95, 1.0, 0.5, "rank 1", "blocked", size=FONT - 1)
    note(ax, 4.25, 2.7, "SIGKILL\nin epoch 2", "blocked", size=FONT - 3)
    note(ax, 3.15, 2.7, "stopped\nby the agent", size=FONT - 3)
    # attempt 1
    box(ax, 2.5, 0.3, 2.4, 1.5, "attempt 1", "idle", align="top", dashed=True)
    box(ax, 2.65, 0.55, 1.0, 0.5, "rank 0", "process", size=FONT - 1)
    box(ax, 3.75, 0.55, 1.0, 0.5, "rank 1", "process", size=FONT - 1)
    arrow(ax, (2.1, 3.2), (2.55, 3.2), "", "system")
    arrow(ax, (2.1, 1.0), (2.55, 1.0), "", "system")
    arrow(ax, (3.7, 2.4), (3.7, 1.85), "restart", "system", label_offset=(0.38, -0.05))
    # snapshot
    box(ax, 6.0, 1.7, 1.8, 0.9, "snapshot.pt\nepoch 1: model,\noptimizer", "system", size=FONT - 1)
    arrow(ax, (4.9, 3.2), (6.4, 2.62), "rank 0 writes\n(tmp, then rename)", "message", label_offset=(0.1, 0.22))
    arrow(ax, (6.4, 1.7), (4.9, 1.0), "both load it,\ngo on at epoch 2", "message", label_offset=(0.35, -0.55))
    return fig


@figure(
    "07-signal-path",
    alt="The scheduler sends SIGTERM to torchrun, which forwards it to every rank; each rank's handler only "
    "records it, the ranks agree on a step with an all-reduce, rank 0 writes a snapshot and all exit; "
    "SIGKILL follows after the grace period",
)
def signal_path():
    fig, ax = canvas(8, 3.8)
    box(ax, 0.2, 1.5, 1.4, 0.8, "scheduler\n(Slurm, k8s)", "system", size=FONT - 1)
    box(ax, 2.3, 1.5, 1.4, 0.8, "torchrun\nagent", "system", size=FONT - 1)
    arrow(ax, (1.6, 1.9), (2.3, 1.9), "SIGTERM", "blocked", label_offset=(0, 0.1))
    for i, y in enumerate((2.55, 0.45)):
        box(ax, 4.5, y, 1.6, 0.8, f"rank {i}\nhandler: flag", "process", size=FONT - 1)
        arrow(ax, (3.7, 1.9), (4.5, y + 0.4), "SIGTERM" if i == 0 else "", "blocked", label_offset=(-0.1, 0.05))
    arrow(ax, (5.3, 2.55), (5.3, 1.25), "all-reduce\nthe flag", "message", both=True, label_offset=(0.55, -0.3))
    box(ax, 6.5, 1.5, 1.35, 0.8, "snapshot\nof this step", "system", size=FONT - 1)
    arrow(ax, (6.1, 2.95), (7.1, 2.3), "rank 0", "message", label_offset=(0.2, 0.05))
    note(ax, 4.0, 3.62, "the agent waits --shutdown-timeout (30 s), then sends SIGKILL", "blocked", size=FONT - 1)
    note(ax, 1.1, 0.6, "a requeued job\nresumes at that step", size=FONT - 1)
    return fig
