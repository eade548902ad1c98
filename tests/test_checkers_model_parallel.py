"""The checkers of notebook 09 cannot be fooled: the notebook's placeholder and the typical wrong answers
get "Not yet" every time, the solution "Correct" every time (20 runs each). The byte and split checkers
are arithmetic on counted numbers (one process group measures the bytes once); the tensor-parallel plans
run 20 times each inside one process group, judged by the checker's own verdict function."""

import multiprocessing as mp

import pytest
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from helpers import model_parallel as mpar
from helpers.checks import model_parallel as checks

RUNS = 20
needs_fork = pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="the checker pins fork")


@pytest.fixture(scope="module")
def measured():
    return mpar.launch([mpar.sharded], 2, kwargs={"sharded": {"steps": 1}})


def _bytes(ddp, zero, fsdp):
    return {
        way: dict(zip(checks.KINDS, row, strict=True)) for way, row in zip(checks.WAYS, (ddp, zero, fsdp), strict=True)
    }


def solution_bytes(n):
    whole = 4 * n
    return _bytes((whole, whole, 2 * whole), (whole, whole, whole), (whole // 2, whole // 2, whole))


# --------------------------------------------------------------------------------- exercise 3: bytes
def test_bytes_placeholder_wrong_and_solution(measured):
    n = measured[0]["sharded"]["parameter bytes"] // 4
    whole = 4 * n
    placeholder = _bytes((0, 0, 0), (0, 0, 0), (0, 0, 0))
    one_moment = _bytes((whole, whole, whole), (whole, whole, whole // 2), (whole // 2, whole // 2, whole // 2))
    zero_shards_grads = _bytes((whole, whole, 2 * whole), (whole, whole // 2, whole), (whole // 2, whole // 2, whole))
    for _ in range(RUNS):
        assert not checks.bytes_per_rank(placeholder, measured)
        got = checks.bytes_per_rank(one_moment, measured)
        assert not got and "two moments" in repr(got), repr(got)
        got = checks.bytes_per_rank(zero_shards_grads, measured)
        assert not got and "ZeRO-1 gradients" in repr(got), repr(got)
        got = checks.bytes_per_rank(solution_bytes(n), measured)
        assert got and repr(got).startswith("Correct"), repr(got)
    assert "fill in my_bytes" in repr(checks.bytes_per_rank(None, measured))
    assert "needs a number" in repr(checks.bytes_per_rank({"DDP": {}}, measured))
    with pytest.raises(TypeError, match="answer must be a dict"):
        checks.bytes_per_rank(3, measured)
    with pytest.raises(TypeError, match="measured must be"):
        checks.bytes_per_rank(solution_bytes(n), None)


def test_bytes_hints_follow_the_direction_of_the_error(measured):
    n = measured[0]["sharded"]["parameter bytes"] // 4
    whole = 4 * n
    fsdp_unsharded = _bytes((whole, whole, 2 * whole), (whole, whole, whole), (whole, whole // 2, whole))  # 2x
    zero_halves_params = _bytes((whole, whole, 2 * whole), (whole // 2, whole, whole), (whole // 2, whole // 2, whole))
    fsdp_quarter = _bytes((whole, whole, 2 * whole), (whole, whole, whole), (whole // 4, whole // 2, whole))
    for _ in range(RUNS):
        got = repr(checks.bytes_per_rank(fsdp_unsharded, measured))
        assert got.startswith("Not yet") and "FSDP parameters" in got and "shards them over the 2 ranks" in got, got
        got = repr(checks.bytes_per_rank(zero_halves_params, measured))
        assert got.startswith("Not yet") and "ZeRO-1 does not shard the parameters" in got, got
        got = repr(checks.bytes_per_rank(fsdp_quarter, measured))
        assert got.startswith("Not yet") and "a half, not less" in got, got


def test_pipeline_split_names_its_verdict_a_model():
    assert "counted FLOPs" in repr(checks.pipeline_split(6))


# --------------------------------------------------------------------------------- exercise 1: split
def test_split_placeholder_wrong_and_solution():
    for _ in range(RUNS):
        got = checks.pipeline_split(4)  # the placeholder: half of the layers
        assert not got and "more layers" in repr(got), repr(got)
        got = checks.pipeline_split(7)  # one heavy layer per stage
        assert not got and "fewer layers" in repr(got), repr(got)
        got = checks.pipeline_split(6)
        assert got and repr(got).startswith("Correct"), repr(got)
    assert not checks.pipeline_split(5)
    assert "set my_split" in repr(checks.pipeline_split(None))
    assert "split must be in 1..7" in repr(checks.pipeline_split(0))
    assert "split must be an int" in repr(checks.pipeline_split("6"))


# ---------------------------------------------------------------------------------- exercise 2: plan
PLANS = {
    "placeholder": {},
    "both column": {"up": ColwiseParallel(), "down": ColwiseParallel()},
    "both row": {"up": RowwiseParallel(), "down": RowwiseParallel()},
    "gathered": {
        "up": ColwiseParallel(output_layouts=Replicate()),
        "down": ColwiseParallel(output_layouts=Replicate()),
    },
    "solution": {"up": ColwiseParallel(), "down": RowwiseParallel()},
}


@needs_fork
def test_plans_twenty_runs_each_in_one_group():
    demos = {name: mpar.tensor_parallel for name in PLANS}
    kwargs = {name: {"plan": plan, "runs": RUNS} for name, plan in PLANS.items()}
    results = mpar.launch(demos, 2, start_method="fork", kwargs=kwargs, timeout=120)
    for rank in (0, 1):
        for name in PLANS:
            rows = results[rank][name]["runs"]
            verdicts = [checks.tp_verdict(row) for row in rows]
            assert len(verdicts) == RUNS
            if name == "solution":
                assert all(verdicts), repr(verdicts[0])
            else:
                assert not any(verdicts), (name, repr(verdicts[0]))
    text = {name: repr(checks.tp_verdict(results[0][name]["runs"][0])) for name in PLANS}
    assert "nothing is sharded" in text["placeholder"]
    assert "fails in torch" in text["both column"] or "differ" in text["both column"]
    assert "fails in torch" in text["both row"] or "differ" in text["both row"]
    assert "needs one all-reduce" in text["gathered"]


@needs_fork
def test_plan_checker_end_to_end():
    assert checks.tensor_parallel_plan(PLANS["solution"])
    assert not checks.tensor_parallel_plan(PLANS["both column"])
    assert "write my_plan" in repr(checks.tensor_parallel_plan(None))
    with pytest.raises(TypeError, match="plan must be a dict"):
        checks.tensor_parallel_plan([ColwiseParallel()])
