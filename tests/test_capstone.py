"""helpers.capstone: the slow job is deterministic for its seed, its fixes keep the work and the
accuracy, the seeding mistake shows in the draws, and bad arguments are refused by name. Tiny sizes:
no waits, a light decode."""

from dataclasses import replace

import pytest
import torch
from example_runner import run_example

from helpers import capstone, environment

FAST = replace(capstone.ORIGINAL, wait=0.0, passes=1, n=64, samples=128)


def test_a_run_is_deterministic_for_its_seed():
    a, b = capstone.train(FAST), capstone.train(FAST)
    assert (a.samples, a.accuracy, a.distinct_draws, a.log_lines) == (b.samples, b.accuracy, b.distinct_draws, 16)
    assert a.samples == 128 and a.data_wait > 0 and a.compute > 0 and a.cpu > 0


def test_the_original_reaches_the_target_on_its_budget():
    run = capstone.train(replace(capstone.ORIGINAL, wait=0.0, passes=1))
    assert run.samples == capstone.ORIGINAL.samples and run.accuracy >= capstone.TARGET_ACCURACY


def test_stored_generator_repeats_in_workers_until_reseeded():
    two = replace(FAST, num_workers=2, batch_size=8)
    assert capstone.train(two).distinct_draws == 32  # 2 identical workers, and the same again next epoch
    assert capstone.train(replace(two, persistent_workers=True)).distinct_draws == 64
    assert capstone.train(replace(two, persistent_workers=True, reseed=True)).distinct_draws == 128


def test_more_workers_than_cores_warning_is_caught_without_its_numbers():
    many = replace(FAST, num_workers=environment.usable_cores() + 1, persistent_workers=True, batch_size=16)
    run = capstone.train(many)
    assert run.warnings == ["This DataLoader will create N worker processes in total"]


def test_steps_plan_changes_one_thing_at_a_time():
    plan = capstone.steps_plan(cores=2)
    assert plan[0] == ("original", capstone.ORIGINAL)
    for (_, before), (_, after) in zip(plan, plan[1:], strict=False):
        changed = {k for k in vars(before) if getattr(before, k) != getattr(after, k)}
        assert 1 <= len(changed) <= 2 and changed <= {
            "num_workers",
            "persistent_workers",
            "batch_size",
            "lr",
            "log_every",
            "reseed",
        }
    assert plan[-1][1].num_workers == 4 and plan[-1][1].batch_size == 32


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"num_workers": -1}, ValueError, "num_workers"),
        ({"lr": 0}, ValueError, "lr"),
        ({"persistent_workers": True}, ValueError, "persistent_workers"),
        ({"samples": 100}, ValueError, "samples"),
        ({"batch_size": 2.0}, TypeError, "batch_size"),
    ],
)
def test_config_refuses_bad_values(kwargs, error, word):
    with pytest.raises(error, match=word):
        capstone.Config(**kwargs)


def test_helpers_refuse_bad_arguments():
    with pytest.raises(TypeError, match="config"):
        capstone.train({"batch_size": 8})
    with pytest.raises(TypeError, match="job"):
        capstone.train_second(capstone.slow_prepare)
    with pytest.raises(TypeError, match="prepare"):
        capstone.SecondJob(prepare=3)
    with pytest.raises(IndexError, match="index"):
        capstone.SlowDataset(n=4)[4]
    with pytest.raises(ValueError, match="batch_size"):
        capstone.train_ddp(replace(FAST, batch_size=9), world_size=2)


def test_threads_are_restored_after_a_run():
    before = torch.get_num_threads()
    capstone.train(replace(FAST, main_threads=1))
    capstone.step_seconds(threads=1, steps=2)
    assert torch.get_num_threads() == before


def test_second_job_counts_rows_and_keeps_accuracy_reproducible():
    a = capstone.train_second(samples=128, n=128)
    b = capstone.train_second(samples=128, n=128)
    assert a.samples == 128 and a.accuracy == b.accuracy and a.prepare > 0


def test_corrupt_record_is_refused():
    record, _ = capstone._record(0, 1, capstone._prototypes(0))
    with pytest.raises(ValueError, match="checksum"):
        capstone._decode(record[:-1] + bytes([record[-1] ^ 1]), passes=1)


def test_ddp_sees_the_whole_budget():
    ddp = capstone.train_ddp(replace(FAST, batch_size=8), world_size=2)
    assert ddp["samples"] == 128 and ddp["world_size"] == 2 and ddp["accuracy"] is not None


# ------------------------------------------------------------------------------ the chapter's example script


def test_example_script_trains_to_the_target_and_leaves_nothing_behind():
    out = run_example("08_fast_training.py", "--samples", "1024")
    accuracy = float(out.strip().splitlines()[-1].rsplit(" ", 1)[1].rstrip("%"))
    assert accuracy >= capstone.TARGET_ACCURACY, out
    assert "1024 samples in" in out
