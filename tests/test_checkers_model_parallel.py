"""The checkers of notebook 09 cannot be fooled: the notebook's placeholder and the typical wrong answers
get "Not yet" every time (3 runs each: no verdict here rests on timing), the solution "Correct" every time
(20 runs). The byte and split checkers are arithmetic on counted numbers (one process group measures the
bytes once); the tensor-parallel plans run inside one process group (the solution 20 times, each wrong
plan 3), judged by the checker's own verdict function."""

import multiprocessing as mp

import pytest
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from helpers import model_parallel as mpar
from helpers.checks import model_parallel as checks

RUNS = 20
RUNS_DETERMINISTIC = 3  # wrong answers whose verdict no timing, load or chance can change: 3 runs show it is stable
needs_fork = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checker pins fork")


@pytest.fixture(scope="module")
def measured():
    return mpar.launch([mpar.sharded], 2, kwargs={"sharded": {"steps": 1}})


def _bytes(ddp, zero, fsdp):
    return {
        way: dict(zip(checks.KINDS, row, strict=True)) for way, row in zip(checks.WAYS, (ddp, zero, fsdp), strict=True)
    }


SIZES = {name: p.numel() for name, p in mpar.make_mlp(mpar.SHARD["widths"]).named_parameters()}
W = 4 * sum(SIZES.values())  # psi: the parameter bytes
ZERO = [8 * SIZES["2.weight"], 2 * W - 8 * SIZES["2.weight"]]  # Adam's moments per rank under ZeRO-1
SOLUTION = _bytes((W, W, 2 * W), (W, W, ZERO), (W // 2, W // 2, W))
NO_BIAS = 4 * sum(n for name, n in SIZES.items() if name.endswith("weight"))
WRONG = {  # answers a learner would plausibly write, each with the reason its hint must name
    "placeholder": (_bytes((0, 0, 0), (0, 0, 0), (0, 0, 0)), "DDP parameters, rank 0", "Does DDP shard them"),
    "ZeRO-1 halves": (
        _bytes((W, W, 2 * W), (W, W, W), (W // 2, W // 2, W)),
        "ZeRO-1 optimizer",
        "largest tensor first",
    ),
    "ranks swapped": (_bytes((W, W, 2 * W), (W, W, ZERO[::-1]), (W // 2, W // 2, W)), "ZeRO-1 optimizer", "which rank"),
    "biases left out": (
        _bytes((NO_BIAS, NO_BIAS, 2 * NO_BIAS), (NO_BIAS, NO_BIAS, ZERO), (NO_BIAS // 2, NO_BIAS // 2, NO_BIAS)),
        "DDP parameters",
        "the biases too",
    ),
    "one moment": (
        _bytes((W, W, W), (W, W, [z // 2 for z in ZERO]), (W // 2, W // 2, W // 2)),
        "DDP optimizer",
        "two moments",
    ),
    "ZeRO-1 shards gradients": (
        _bytes((W, W, 2 * W), (W, W // 2, ZERO), (W // 2, W // 2, W)),
        "ZeRO-1 gradients",
        "does not shard the gradients",
    ),
    "FSDP whole": (_bytes((W, W, 2 * W), (W, W, ZERO), (W, W // 2, W)), "FSDP parameters", "each rank holds half"),
    "FSDP a quarter": (_bytes((W, W, 2 * W), (W, W, ZERO), (W // 4, W // 2, W)), "FSDP parameters", "a half, not less"),
    "ZeRO-1 halves parameters": (
        _bytes((W, W, 2 * W), (W // 2, W, ZERO), (W // 2, W // 2, W)),
        "ZeRO-1 parameters",
        "does not shard the parameters",
    ),
    "step counters kept": (
        _bytes((W, W, 2 * W + 24), (W, W, ZERO), (W // 2, W // 2, W)),
        "DDP optimizer",
        "step counters",
    ),
    "a string": (_bytes((str(W), W, 2 * W), (W, W, ZERO), (W // 2, W // 2, W)), "must be a number", "list of 2"),
}


# --------------------------------------------------------------------------------- exercise 3: bytes
def test_bytes_placeholder_wrong_answers_and_solution(measured):
    assert measured[0]["sharded"]["parameter bytes"] == W
    for _ in range(RUNS_DETERMINISTIC):  # arithmetic on the numbers measured once: the same verdict every run
        for name, (answer, where, hint) in WRONG.items():
            got = repr(checks.bytes_per_rank(answer, measured))
            assert got.startswith("Not yet") and where in got and hint in got, (name, got)
    for _ in range(RUNS):
        got = repr(checks.bytes_per_rank(SOLUTION, measured))
        assert got.startswith("Correct") and "to the byte" in got, got
    assert "fill in my_bytes" in repr(checks.bytes_per_rank(None, measured))
    assert "must be a dict with" in repr(checks.bytes_per_rank({"DDP": 3}, measured))
    assert "must be a dict {way" in repr(checks.bytes_per_rank(3, measured))  # a verdict, not a traceback
    with pytest.raises(TypeError, match="measured must be"):
        checks.bytes_per_rank(SOLUTION, None)


def test_bytes_one_number_for_both_ranks_is_the_same_as_a_pair(measured):
    pairs = {
        way: {kind: v if isinstance(v, list) else [v, v] for kind, v in row.items()} for way, row in SOLUTION.items()
    }
    assert repr(checks.bytes_per_rank(pairs, measured)).startswith("Correct")
    pairs["FSDP"]["parameters"] = [W // 2, W // 2 + 4]
    assert "FSDP parameters, rank 1" in repr(checks.bytes_per_rank(pairs, measured))


def test_pipeline_split_names_its_verdict_a_model():
    assert "counted FLOPs" in repr(checks.pipeline_split(6))


# --------------------------------------------------------------------------------- exercise 1: split
def test_split_placeholder_wrong_and_solution():
    for _ in range(RUNS_DETERMINISTIC):  # arithmetic on counted FLOPs: the same verdict every run
        got = checks.pipeline_split(4)  # the placeholder: half of the layers
        assert not got and "more layers" in repr(got), repr(got)
        got = checks.pipeline_split(7)  # one heavy layer per stage
        assert not got and "fewer layers" in repr(got), repr(got)
    for _ in range(RUNS):
        got = checks.pipeline_split(6)
        assert got and repr(got).startswith("Correct"), repr(got)
    assert not checks.pipeline_split(5)
    assert "set my_split" in repr(checks.pipeline_split(None))
    assert "split must be in 1..7" in repr(checks.pipeline_split(0))
    assert "split must be an int" in repr(checks.pipeline_split("6"))


# ---------------------------------------------------------------------------------- exercise 2: plan
C, R = ColwiseParallel, RowwiseParallel
PLANS = {  # the placeholder, wrong plans a learner would write (each with the reason named), the solution
    "placeholder": ({}, "are whole on every rank"),
    "first pair only": ({"fc1": C(), "fc2": R()}, "fc3, fc4 are whole"),
    "all column-wise": ({n: C() for n in ("fc1", "fc2", "fc3", "fc4")}, "torch refused the plan"),
    "row then column": ({"fc1": R(), "fc2": C(), "fc3": R(), "fc4": C()}, "torch refused the plan"),
    "all row-wise, inputs replicated": (
        {n: R(input_layouts=Replicate()) for n in ("fc1", "fc2", "fc3", "fc4")},
        "the forward ran {'all_reduce': 4}",
    ),
    "outputs gathered": (
        {n: C(output_layouts=Replicate()) for n in ("fc1", "fc2", "fc3", "fc4")},
        "an all-gather",
    ),
    "second pair gathered": (
        {"fc1": C(), "fc2": R(), "fc3": C(output_layouts=Replicate()), "fc4": R(input_layouts=Replicate())},
        "an all-gather",
    ),
    "solution": ({"fc1": C(), "fc2": R(), "fc3": C(), "fc4": R()}, "Correct"),
}


@needs_fork
def test_plans_run_repeatedly_in_one_group():
    # A wrong plan's verdict comes from counted collectives, placements, torch's refusal and a comparison of
    # seeded numbers, never from time: RUNS_DETERMINISTIC runs each; the solution RUNS.
    runs = {name: RUNS if name == "solution" else RUNS_DETERMINISTIC for name in PLANS}
    demos = {name: mpar.tensor_parallel for name in PLANS}
    kwargs = {name: {"plan": plan, "runs": runs[name], "module": "Stack"} for name, (plan, _) in PLANS.items()}
    results = mpar.launch(demos, 2, start_method="fork", kwargs=kwargs, timeout=180)
    for rank in (0, 1):
        for name, (_, reason) in PLANS.items():
            verdicts = [checks.tp_verdict(row) for row in results[rank][name]["runs"]]
            assert len(verdicts) == runs[name]
            for v in verdicts:
                text = repr(v)
                assert bool(v) == (name == "solution") and reason in text, (name, text)
    assert "0.501 of the weight bytes" in repr(checks.tp_verdict(results[0]["solution"]["runs"][0]))


@needs_fork
def test_plan_checker_end_to_end(capfd):
    assert checks.tensor_parallel_plan(PLANS["solution"][0])
    capfd.readouterr()
    got = checks.tensor_parallel_plan(PLANS["all column-wise"][0])
    assert not got and "torch refused the plan" in repr(got)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err and "fake_tensor" not in out + err  # the ranks' logs stay quiet
    assert "write my_plan" in repr(checks.tensor_parallel_plan(None))
    assert "not a layer of mpar.Stack" in repr(checks.tensor_parallel_plan({"up": C(), "down": R()}))
    assert "must be a style" in repr(checks.tensor_parallel_plan({"fc1": "column"}))
    assert "must be a style" in repr(checks.tensor_parallel_plan({"fc1": C}))  # the class, not an instance
    assert "my_plan must be a dict" in repr(checks.tensor_parallel_plan([C()]))  # a verdict, not a traceback
