"""checks.predicted_sent: the placeholder, wrong types and plausible wrong predictions are refused with a
hint that names the real reason; the solution is accepted. The checker measures the answer in the
simulation; the cases here are computed from the same notebook's psi, as a learner would."""

from __future__ import annotations

import warnings

import pytest

from helpers import checks, scale

warnings.filterwarnings("ignore", module="torch")

PSI = 4 * scale.parameter_count()
SOLUTION = 3 * PSI * 7 / 8 + 2 * (PSI / 8) * 31 / 32


def test_the_solution_is_correct():
    v = checks.predicted_sent(SOLUTION)
    assert v and repr(v).startswith("Correct"), repr(v)
    assert checks.predicted_sent(round(SOLUTION))  # an int is fine


@pytest.mark.parametrize(
    "guess, reason",
    [
        (0, "write my_sent"),  # the placeholder
        (None, "must be a number"),
        ("24 GB", "must be a number"),
        (True, "must be a number"),
        (float("nan"), "write my_sent"),
        (3 * PSI * 7 / 8, "replicas must also agree"),  # FSDP within the group, no all-reduce across
        (3 * PSI * 255 / 256, "FSDP over all 256"),  # the whole world as one shard group
        (3 * PSI * 255 / 256 + 2 * (PSI / 8) * 31 / 32, "FSDP over all 256"),
        (3 * PSI + 2 * PSI / 8, "(g - 1) / g"),  # no ring factor
        (3 * PSI * 7 / 8 + 2 * PSI * 31 / 32, "only its own shard"),  # the whole psi all-reduced
        (2 * PSI * 255 / 256, "DDP's all-reduce"),
        (2 * PSI, "DDP's all-reduce"),
        (PSI, "too little"),
        (10 * PSI, "too much"),
    ],
)
def test_wrong_answers_get_not_yet_and_the_reason(guess, reason):
    for _ in range(2):  # the same verdict every time
        v = checks.predicted_sent(guess)
        assert not v
        assert repr(v).startswith("Not yet") and reason in repr(v), repr(v)


def test_the_layout_choice_solution_is_correct():
    v = checks.layout_choice("FSDP x TP")
    assert v and repr(v).startswith("Correct"), repr(v)


@pytest.mark.parametrize(
    "layout, reason",
    [
        ("", "set my_layout"),  # the placeholder
        (None, "(a str)"),
        (3, "(a str)"),
        ("fsdp", "must be one of"),
        ("DDP", "more than 80 GiB"),
        ("ZeRO-1", "more than 80 GiB"),
        ("TP", "inside a machine"),
        ("FSDP", "sends less"),
        ("FSDP no reshard", "sends less"),
        ("FSDP bf16", "sends less"),
        ("HSDP", "sends less"),
        ("FSDP reshard to 8", "sends less"),
    ],
)
def test_wrong_layouts_get_not_yet_and_the_reason(layout, reason):
    v = checks.layout_choice(layout)
    assert not v
    assert repr(v).startswith("Not yet") and reason in repr(v), repr(v)
