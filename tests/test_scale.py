"""helpers.scale: the simulation (fake process group, fake tensors) against the formulas and against a real
2-rank gloo run, the torch internals it relies on, and its refusals of bad input."""

from __future__ import annotations

import warnings
from pathlib import Path

import example_runner
import pytest
import torch

from helpers import scale

warnings.filterwarnings("ignore", module="torch")

SMALL = {"hidden": 64, "layers": 2, "batch": 8}


def test_the_torch_internals_the_chapter_relies_on_are_there():
    assert all(scale.pinned_internals().values()), scale.pinned_internals()


def test_a_fake_collective_returns_at_once_and_moves_nothing():
    """What the chapter tells learners: the fake backend's results are not the collective's."""
    import torch.distributed as dist

    with scale.fake_group(1, 4):
        assert (dist.get_rank(), dist.get_world_size()) == (1, 4)
        t = torch.ones(3)
        dist.all_reduce(t)  # a real all-reduce over 4 ranks would give 4
        assert torch.equal(t, torch.ones(3))
    assert not dist.is_initialized()


@pytest.mark.parametrize("world", [8, 16])
@pytest.mark.parametrize("layout", scale.ALL_LAYOUTS)
def test_held_and_sent_equal_the_formulas_to_the_byte(layout, world):
    run = scale.simulate(layout, world, **SMALL)
    formula = scale.held_formula(layout, world, SMALL["hidden"], SMALL["layers"])
    if layout != "ZeRO-1":  # torch's ZeRO-1 gives whole tensors to ranks: tested below
        assert {k: run["held"][k] for k in formula} == formula
    sent = sum(row["sent"] for row in scale.by_kind(run["calls"]).values())
    assert sent == pytest.approx(scale.sent_formula(layout, world, **SMALL), rel=1e-12)


@pytest.mark.parametrize(
    "layout, world, hidden, layers, batch",
    [
        ("FSDP", 32, 128, 3, 4),
        ("FSDP x TP", 64, 256, 1, 16),
        ("HSDP", 32, 128, 2, 4),
        ("TP", 16, 128, 3, 32),
        ("FSDP bf16", 64, 128, 2, 4),
        ("DDP", 32, 128, 1, 4),
        ("FSDP reshard to 8", 64, 64, 3, 4),
        ("FSDP no reshard", 64, 64, 1, 4),
    ],
)
def test_the_calculator_agrees_with_the_simulation(layout, world, hidden, layers, batch):
    row = scale.calculator(layout, world, hidden, layers, batch)
    run = scale.simulate(layout, world, hidden=hidden, layers=layers, batch=batch)
    held = run["held"]["parameters"] + run["held"]["gradients"] + run["held"]["optimizer"]
    sent = sum(r["sent"] for r in scale.by_kind(run["calls"]).values())
    assert row["state GiB per rank"] == pytest.approx(held / 2**30, rel=1e-12)
    assert row["sent GiB per step"] == pytest.approx(sent / 2**30, rel=1e-12)
    assert row["parameters"] == sum(p.numel() for p in scale.make_model(hidden, layers).parameters())


PIPELINES = [(layout, 32, 2) for layout in scale.ALL_LAYOUTS] + [
    (layout, 64, 4) for layout in ("DDP", "FSDP", "TP", "FSDP x TP", "HSDP", "FSDP bf16")
]


@pytest.mark.parametrize("layout, world, pp", PIPELINES)
def test_with_pipeline_stages_every_stage_holds_and_sends_the_formulas_and_the_calculator_the_busiest(
    layout, world, pp
):
    """Each stage's rank 3 (its coordinate 3 in the stage's own layout) against the formulas, to the byte;
    the calculator's memory and bytes against the simulated stages' (the busiest stage's bytes)."""
    model = {"hidden": 64, "layers": 4, "batch": 8}
    held_all, sent_all = [], []
    for stage in range(pp):
        run = scale.simulate(layout, world, rank=stage * (world // pp) + 3, pp=pp, **model)
        assert run["coordinate"][0] == stage and run["mesh"][0] == pp
        formula = scale.held_formula(layout, world, model["hidden"], model["layers"], pp)
        if layout != "ZeRO-1":  # torch's ZeRO-1 gives whole tensors to ranks (tested below)
            assert {k: run["held"][k] for k in formula} == formula
        kinds = scale.by_kind(run["calls"])
        sent = sum(row["sent"] for row in kinds.values())
        assert sent == pytest.approx(scale.sent_formula(layout, world, **model, pp=pp, stage=stage), rel=1e-12)
        # the boundary: one send forward unless last, one back unless first
        assert kinds["send"]["calls"] == (stage < pp - 1) + (stage > 0)
        held_all.append(run["held"]["parameters"] + run["held"]["gradients"] + run["held"]["optimizer"])
        sent_all.append(sent)
    row = scale.calculator(layout, world, model["hidden"], model["layers"], model["batch"], pp=pp)
    if layout != "ZeRO-1":
        assert row["state GiB per rank"] == pytest.approx(max(held_all) / 2**30, rel=1e-12)
    assert row["sent GiB per step"] == pytest.approx(max(sent_all) / 2**30, rel=1e-12)
    # and a stage holds only its own blocks: pp stages hold what the whole model does without pp
    whole = scale.simulate(layout, world // pp, rank=3, **model)["held"]["parameters"]
    assert run["held"]["parameters"] * pp == whole


def test_pipeline_degree_is_checked():
    with pytest.raises(ValueError, match="pp must divide world_size"):
        scale.calculator("FSDP", 64, 64, 4, 8, pp=3)
    with pytest.raises(ValueError, match="pp must divide layers"):
        scale.held_formula("FSDP", 64, 64, 3, pp=2)
    with pytest.raises(TypeError, match="pp"):
        scale.calculator("FSDP", 64, 64, 4, 8, pp=2.0)
    with pytest.raises(ValueError, match="stage"):
        scale.sent_formula("FSDP", 64, 64, 4, 8, pp=2, stage=2)


def test_uneven_shards_make_the_first_ranks_hold_more_than_psi_over_n():
    """`down` (64 x 256) and the biases have fewer rows than 128 ranks: FSDP2 splits like torch.chunk,
    so rank 3 holds a whole row of them and rank 127 none; the formula psi / n is their mean."""
    world, small = 128, {"hidden": 64, "layers": 1, "batch": 4}
    psi = 4 * scale.parameter_count(64, 1)
    first = scale.simulate("FSDP", world, rank=3, **small)["held"]["parameters"]
    last = scale.simulate("FSDP", world, rank=127, **small)["held"]["parameters"]
    assert first > psi / world > last


def test_zero1_ranks_together_hold_one_copy_of_adams_state_in_whole_tensors():
    world = 4
    psi = 4 * scale.parameter_count(SMALL["hidden"], SMALL["layers"])
    held = [scale.simulate("ZeRO-1", world, rank=r, **SMALL)["held"] for r in range(world)]
    assert sum(h["optimizer"] for h in held) == 2 * psi
    assert all(h["parameters"] == psi and h["gradients"] == psi for h in held)


def test_mixed_precision_keeps_the_shards_fp32_and_gathers_bf16():
    run = scale.simulate(scale.MIXED, 8, **SMALL)
    assert run["dtypes"] == {
        "parameter shard": "torch.float32",
        "gradient shard": "torch.float32",
        "block output": "torch.bfloat16",
    }
    plain = scale.simulate("FSDP", 8, **SMALL)
    assert scale.by_kind(run["calls"])["all-gather"]["sent"] * 2 == scale.by_kind(plain["calls"])["all-gather"]["sent"]
    assert scale.by_kind(run["calls"])["reduce-scatter"] == scale.by_kind(plain["calls"])["reduce-scatter"]


def test_fsdp_at_1024_ranks_of_the_notebooks_model_holds_one_1024th():
    run = scale.simulate("FSDP", 1024)
    psi = 4 * scale.parameter_count()
    assert run["held"]["parameters"] * 1024 == psi
    assert scale.by_kind(run["calls"])["all-gather"]["calls"] == 2 * scale.MODEL["layers"]


def test_the_simulation_equals_a_real_two_rank_gloo_run(capfd):
    from helpers import model_parallel

    # spawn ranks start with Python's own warning filters and write to the terminal that runs JupyterLab:
    # DTensor's warning about random ops on a CPU mesh is not for learners
    real = model_parallel.launch([scale.real_rank], 2, start_method="spawn")
    assert "DTensor random operators" not in capfd.readouterr().err
    result = scale.simulation_vs_real(real)
    assert set(result) == set(scale.ONE_D)
    assert all(r["held"] and r["collectives"] for r in result.values()), result
    # and the real run did communicate: the comparison is not of two empty logs
    assert all(real[0]["real_rank"][layout]["calls"] for layout in scale.ONE_D)


def test_sent_per_rank_is_the_ring_count():
    assert scale.sent_per_rank("all-reduce", 4, 100) == 150
    assert scale.sent_per_rank("all-gather", 4, 100) == 75
    assert scale.sent_per_rank("reduce-scatter", 1, 100) == 0
    assert scale.sent_per_rank("send", 2, 100) == 100
    with pytest.raises(ValueError, match="kind"):
        scale.sent_per_rank("gather", 4, 100)
    with pytest.raises(TypeError, match="group"):
        scale.sent_per_rank("all-gather", 2.0, 100)


def test_bad_input_is_refused_with_the_argument_named():
    with pytest.raises(ValueError, match="layout"):
        scale.mesh_dims("ZeRO-3", 8)
    with pytest.raises(ValueError, match="multiple of 8"):
        scale.mesh_dims("HSDP", 12)
    with pytest.raises(TypeError, match="world_size"):
        scale.mesh_dims("FSDP", "8")
    with pytest.raises(ValueError, match="rank"), scale.fake_group(4, 4):
        pass
    with pytest.raises(ValueError, match="hidden"):
        scale.make_model(0, 2)


def test_the_fit_recovers_a_known_line_and_predicts_the_sizes_left_out():
    latency, bandwidth = 50e-6, 2e9
    times = {s: latency + 2 * (2 - 1) / 2 * s / bandwidth for s in scale.SWEEP}
    fit = scale.fit_allreduce(times, 2)
    assert fit["latency"] == pytest.approx(latency, rel=1e-9)
    assert fit["bandwidth"] == pytest.approx(bandwidth, rel=1e-9)
    assert set(fit["left out"]) == set(sorted(times)[1::2])
    assert all(r == pytest.approx(1) for r in fit["left out"].values())
    with pytest.raises(ValueError, match="times"):
        scale.fit_allreduce({1024: 1e-4}, 2)


def test_step_seconds_charges_the_slowest_link_each_group_crosses():
    run = {"calls": [("all-gather", 8, 800), ("all-reduce", 4, 400), ("reduce-scatter", 1, 100)], "machines": [1, 2, 1]}
    cluster = {"inside bytes/s": 100.0, "across bytes/s": 10.0, "inside latency s": 1.0, "across latency s": 2.0,
               "FLOP/s": 1.0, "MFU": 1.0}  # fmt: skip
    t = scale.step_seconds(run, "FSDP", 8, cluster, hidden=4, layers=1, batch=2)
    gather = 7 * 1.0 + 800 * 7 / 8 / 100.0
    reduce = 2 * 3 * 2.0 + 2 * 400 * 3 / 4 / 10.0
    assert t["communication"] == pytest.approx(gather + reduce)
    assert t["compute"] == pytest.approx(6 * scale.parameter_count(4, 1) * 2)


def test_the_log_says_which_groups_cross_machines():
    run = scale.simulate("HSDP", 64, **SMALL)
    spans = {kind: set() for kind, _, _ in run["calls"]}
    for (kind, _, _), machines in zip(run["calls"], run["machines"], strict=True):
        spans[kind].add(machines)
    assert spans == {"all-gather": {1}, "reduce-scatter": {1}, "all-reduce": {8}}  # shard inside, replicas across


def test_the_bench_figure_of_simulated_over_real_bytes_is_exactly_one():
    fig = scale.sim_over_real_bytes()
    assert fig.ratio == 1.0 and fig.limit == 1.0 and all(fig.conditions.values()), fig.details


def test_trained_weights_reach_the_shards_from_rank_0_and_the_norm_is_global():
    from helpers import model_parallel

    result = model_parallel.launch([scale.pretrained], 2)
    for rank in (0, 1):
        row = result[rank]["pretrained"]
        assert row["weights equal rank 0's"], row
        assert row["bytes here"] * 2 == row["bytes whole"]
        assert row["norm type"] == "DTensor"
        assert row["norm"] == pytest.approx(row["one process's norm"], abs=1e-6)


def test_activation_checkpointing_keeps_only_each_blocks_input_and_the_same_gradients():
    result = scale.checkpointing(hidden=32, layers=3, batch=8)
    assert result["kept"] == result["formula"]
    assert result["same gradients"]


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "10_dry_run.py"


def test_example_dry_run_prints_one_nth_and_leaves_nothing_behind():
    args = ["--world-size", "64", "--rank", "5", "--hidden", "256", "--layers", "2"]
    lines = example_runner.run(EXAMPLE.name, *args, timeout=300).out.strip().splitlines()
    psi = 4 * scale.parameter_count(256, 2)
    assert f"rank 5 of 64 holds {psi // 64:,} bytes of parameters" in lines
    assert f"rank 5 of 64 holds {2 * psi // 64:,} bytes of Adam state" in lines
    assert lines[-1] == "parameters held x world size == the whole model: True"


def test_a_real_pipeline_stage_holds_its_blocks_sends_the_boundary_and_clips_by_the_global_norm():
    """torch.distributed.pipelining on 2 gloo ranks against one process with the whole model, and the
    stages' bytes against the simulation of the same layout (pp=2)."""
    from helpers import model_parallel

    result = model_parallel.launch([scale.pipeline_clip], 2)
    norms = []
    for rank in (0, 1):
        row = result[rank]["pipeline_clip"]
        assert row["parameters here"] * 2 == row["parameters whole"]
        assert row["sends"] == 2 and row["sent"] == row["boundary bytes"]  # 2 micro-batches, one boundary
        assert row["combined norm"] == pytest.approx(row["one process's norm"], abs=1e-6)
        assert row["stage norm"] < row["combined norm"]  # clip_grad_norm_ on one stage would see this
        assert row["clipped gradients equal (1e-6)"]
        assert row["one process's norm"] > 0.01  # max_norm: the clipping did scale the gradients
        sim = scale.simulate("DDP", 2, rank=rank, pp=2, **SMALL)
        assert sim["held"]["parameters"] == 4 * row["parameters here"]
        assert scale.by_kind(sim["calls"])["send"]["sent"] == row["sent"]
        norms.append(row["stage norm"])
    assert sum(n**2 for n in norms) ** 0.5 == pytest.approx(result[0]["pipeline_clip"]["combined norm"], rel=1e-6)


def test_cpu_offload_on_a_cpu_only_build_needs_pin_memory_false_and_moves_nothing():
    """What the notebook says about CPUOffloadPolicy here: its default pins host memory, which needs an
    accelerator; without pinning it runs, and every shard, gradient and Adam tensor is on the CPU, as
    without offload, with the same bytes."""
    result = scale.offload()
    if result["accelerator"]:
        pytest.skip("this torch has an accelerator: pinning works")
    assert result["default policy's error"] == "RuntimeError: Cannot access accelerator device when none is available."
    assert result["devices"] == {k: ["cpu"] for k in ("parameter shards", "gradient shards", "Adam's state")}
    assert not result["pinned"]
    assert result["held"] == result["held without offload"]
    assert result["held"]["parameters"] * 8 == 4 * scale.parameter_count(SMALL["hidden"], SMALL["layers"])
