"""Pictures of notebook 05: how ranks meet, a ring all-reduce step by step, and DDP's buckets overlapping
the backward pass."""

from __future__ import annotations

from helpers.diagrams import animation, figure
from helpers.diagrams.style import FONT, arrow, box, canvas, lane, legend, note

# ------------------------------------------------------------------------------------- rendezvous


@figure(
    "05-rendezvous",
    alt="Three ranks meet: rank 0 hosts a TCPStore at MASTER_ADDR:MASTER_PORT; every rank first writes its "
    "gloo address into the store and reads the others' (the rendezvous), then the ranks open direct gloo "
    "connections to each other, which carry the tensors",
)
def rendezvous():
    fig, ax = canvas(8, 3.6)
    note(ax, 2.0, 3.35, "1. rendezvous: meet at a known address", "system", weight="bold", size=FONT)
    note(ax, 6.0, 3.35, "2. gloo: tensors rank to rank", "message", weight="bold", size=FONT)
    # left: the store on rank 0, the others connect to it
    box(ax, 0.25, 1.48, 1.7, 1.37, "rank 0", "process", align="top")
    box(ax, 0.4, 1.58, 1.4, 0.72, "TCPStore at\nMASTER_ADDR:\nMASTER_PORT", "system", size=FONT - 2)
    box(ax, 2.4, 2.3, 1.2, 0.55, "rank 1", "process")
    box(ax, 2.4, 0.9, 1.2, 0.55, "rank 2", "process")
    arrow(ax, (2.4, 2.55), (1.75, 2.1), "", "system", both=True)
    arrow(ax, (2.4, 1.2), (1.75, 1.75), "", "system", both=True)
    note(ax, 2.0, 0.45, "each rank writes its address,\nreads the others'", "system", size=FONT - 2)
    # right: full mesh of gloo connections
    spots = {0: (4.7, 2.2), 1: (6.9, 2.2), 2: (5.8, 0.8)}
    for r, (x, y) in spots.items():
        box(ax, x - 0.55, y - 0.27, 1.1, 0.55, f"rank {r}", "process")
    arrow(ax, (5.25, 2.2), (6.35, 2.2), "", "message", both=True)
    arrow(ax, (4.7, 1.93), (5.4, 1.07), "", "message", both=True)
    arrow(ax, (6.9, 1.93), (6.2, 1.07), "", "message", both=True)
    note(ax, 5.8, 2.85, "a direct connection per pair", "message", size=FONT - 2)
    note(ax, 5.8, 0.25, "the store is no longer needed for the tensors", "system", size=FONT - 2)
    ax.plot([3.95, 3.95], [0.2, 3.2], color="#BBBBBB", linewidth=1, linestyle=":")
    return fig


# ------------------------------------------------------------------------------ ring all-reduce
N = 3
CHUNKS = "abc"
RANK_X = [0.35, 3.0, 5.65]  # left edge of each rank's box
CELL_W, CELL_H = 1.9, 0.42
ROW_Y = [2.55, 2.05, 1.55]  # chunk a, b, c (top to bottom)


def _ring_state(step: int) -> tuple[list[list[set[int]]], list[tuple[int, int, int]]]:
    """After `step` steps of the ring (0: nothing yet; 1..2 reduce-scatter; 3..4 all-gather): which ranks'
    contributions each rank holds in each chunk, and the sends of that step as (from rank, to rank, chunk).
    The indices are those of `helpers.distributed.ring_allreduce`."""
    held = [[{r} for _ in range(N)] for r in range(N)]  # held[rank][chunk] = contributions summed in
    sends: list[tuple[int, int, int]] = []
    for s in range(step):
        phase, k = ("reduce-scatter", s) if s < N - 1 else ("all-gather", s - (N - 1))
        moves = []
        for r in range(N):
            send_i = (r - k) % N if phase == "reduce-scatter" else (r + 1 - k) % N
            moves.append((r, (r + 1) % N, send_i, set(held[r][send_i])))
        for _src, dst, chunk, content in moves:
            held[dst][chunk] = held[dst][chunk] | content if phase == "reduce-scatter" else content
        sends = [(src, dst, chunk) for src, dst, chunk, _ in moves]
    return held, sends


_CAPTIONS = [
    "Start: every rank holds its own tensor, cut into 3 chunks (a, b, c).\n"
    "Goal: every rank holds a0+a1+a2, b0+b1+b2 and c0+c1+c2",
    "Reduce-scatter, step 1: each rank sends one chunk to its right neighbour,\n"
    "which adds it to its own copy of that chunk",
    "Reduce-scatter, step 2: the partial sums move on.\nNow each rank holds the complete sum of one chunk",
    "All-gather, step 1: each rank sends its complete chunk to the right;\nthe receiver keeps it",
    "All-gather, step 2: the last complete chunks arrive.\nEvery rank holds the full sum",
    "Done: each rank sent 2 (n - 1) = 4 chunks of 1/3, that is 2 (n - 1) / n of the tensor,\n"
    "which stays below 2x the tensor for any number of ranks n",
]


def _label(chunk: int, held: set[int]) -> str:
    return "+".join(f"{CHUNKS[chunk]}{r}" for r in sorted(held))


@animation(
    "05-ring-allreduce",
    alt="A ring all-reduce on 3 ranks, step by step: in two reduce-scatter steps each rank sends one chunk "
    "to its right neighbour, which adds it to its own, until every rank holds the full sum of one chunk; in "
    "two all-gather steps the finished chunks travel on until every rank holds the full sum of all three",
    steps=len(_CAPTIONS),
)
def ring_steps(step: int):
    fig, ax = canvas(8, 3.9)
    shown = min(step, 2 * (N - 1))
    held, sends = _ring_state(shown)
    phase = "start" if shown == 0 else "reduce-scatter" if shown <= N - 1 else "all-gather"
    if step == len(_CAPTIONS) - 1:
        phase, sends = "done", []
    note(ax, 4.0, 3.58, _CAPTIONS[step], size=FONT - 1, weight="bold")
    arrived = {(dst, chunk) for _, dst, chunk in sends}
    for r in range(N):
        x = RANK_X[r]
        box(ax, x, 1.35, CELL_W + 0.2, 1.85, f"rank {r}", "process", align="top")
        for c in range(N):
            complete = len(held[r][c]) == N
            kind = "message" if (r, c) in arrived else "data"
            box(ax, x + 0.1, ROW_Y[c] - 0.15, CELL_W, CELL_H - 0.06, _label(c, held[r][c]), kind,
                size=FONT - 1, weight="bold" if complete else "normal")  # fmt: skip
    for src, dst, chunk in sends:
        y = ROW_Y[chunk] + 0.06
        if dst == src + 1:
            arrow(ax, (RANK_X[src] + CELL_W + 0.1, y), (RANK_X[dst] + 0.1, y), "", "message")
        else:  # the ring closes: the last rank sends to rank 0, along the bottom
            start, end = (RANK_X[src] + 1.05, 1.35), (RANK_X[dst] + 1.05, 1.35)
            arrow(ax, start, end, f"chunk {CHUNKS[chunk]}: rank {src} to rank {dst}", "message", bend=-0.18,
                  label_at=0.5, label_offset=(0, -0.87))  # fmt: skip
    if phase == "done":
        note(ax, 4.0, 0.2, "bold: a complete sum   ·   every rank sent and received the same amount", size=FONT - 2)
    else:
        note(ax, 4.0, 0.2, f"phase: {phase}   ·   pink: a chunk that just arrived   ·   bold: a complete sum",
             size=FONT - 2)  # fmt: skip
    return fig


# ------------------------------------------------------------------------------------ DDP buckets


@figure(
    "05-ddp-buckets",
    alt="A timeline of one DDP backward pass on one rank: gradients are computed from the last layer to the "
    "first; as soon as the gradients of a bucket (here layers 4 and 3) are ready, gloo all-reduces that bucket "
    "while the backward pass goes on computing layers 2 and 1; the optimizer step waits for the last bucket",
)
def ddp_buckets():
    fig, ax = canvas(8, 3.0)
    x0 = 2.0
    lane(ax, 1.95, 0.5, "backward: gradients", x0, 7.8, "process")
    lane(ax, 1.1, 0.5, "all-reduce (gloo)", x0, 7.8, "message")
    layers = [("layer 4", 2.0, 0.9), ("layer 3", 2.9, 0.9), ("layer 2", 3.8, 0.9), ("layer 1", 4.7, 0.9)]
    for name, x, w in layers:
        box(ax, x, 1.95, w - 0.05, 0.5, name, "data", size=FONT - 1)
    box(ax, 3.85, 1.1, 1.5, 0.5, "bucket 1: 4-3", "message", size=FONT - 1)
    box(ax, 5.65, 1.1, 1.15, 0.5, "bucket 2: 2-1", "message", size=FONT - 1)
    box(ax, 6.9, 1.95, 0.85, 0.5, "step()", "process", size=FONT - 2)
    arrow(ax, (3.8, 1.95), (3.9, 1.6), "", "message")
    arrow(ax, (5.6, 1.95), (5.7, 1.6), "", "message")
    arrow(ax, (6.8, 1.35), (6.95, 1.95), "", "message", dashed=True)
    note(ax, 4.6, 2.75, "time →  (backward runs from the last layer to the first)", size=FONT - 2)
    note(ax, 4.6, 0.75, "bucket 1 is sent while layers 2 and 1 are still being computed: the two overlap",
         "message", size=FONT - 2)  # fmt: skip
    legend(ax, 2.0, 0.3, [("data", "computing gradients"), ("message", "gradients crossing between ranks")])
    return fig
