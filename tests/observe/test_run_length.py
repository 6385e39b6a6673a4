"""The planned run's length from the script's own arguments."""

from __future__ import annotations

import pytest

from torchboost.evidence.observed import LoaderFacts
from torchboost.observe.record.facts_builder import planned_run
from torchboost.observe.probes.run_length import length_from_arguments, script_arguments


@pytest.mark.parametrize("argv, batches, expected", [
    (["config/train_shakespeare_char.py", "--max_iters=400", "--device=cpu"], None, (400, "the script's --max_iters=400")),
    (["--max-steps", "1000"], 64, (1000, "the script's --max-steps=1000")),
    (["--epochs", "3"], 64, (192, "the script's --epochs=3 x 64 batches per epoch")),
    (["--num_train_epochs=2", "--steps=50"], 64, (50, "the script's --steps=50")),  # a step count wins
    (["--max_iters=100", "--max_iters=200"], None, (200, "the script's --max_iters=200")),  # the last one, as argparse
    # Twins: nothing that says the length.
    (["--epochs", "3"], None, None),  # epochs without the loader's length
    (["--lr", "3", "--max_iters=abc", "--steps", "-1"], 64, None),
    (["--eval_iters=5", "--warmup_steps=100"], 64, None),  # other counts are not the run's
])
def test_the_length_is_read_where_a_user_would_read_it(argv, batches, expected):
    assert length_from_arguments(argv, batches) == expected


def test_script_arguments_follow_the_script_or_module():
    assert script_arguments(["python", "train.py", "--max_iters=4"]) == ["--max_iters=4"]
    assert script_arguments(["python", "-m", "pkg.train", "--epochs", "2"]) == ["--epochs", "2"]
    assert script_arguments(["torchrun", "--nproc-per-node=2", "train.py", "--steps=9"]) == ["--steps=9"]
    assert script_arguments(["python"]) == []


def test_the_arguments_come_before_one_epoch_of_the_loader():
    loader = LoaderFacts(num_batches=64)
    assert planned_run(loader, None, ["python", "train.py", "--epochs", "3"]) == (
        192, "the script's --epochs=3 x 64 batches per epoch")
    assert planned_run(loader, None, ["python", "train.py"]) == (64, "one epoch of the script's DataLoader")
    assert planned_run(None, None, ["python", "train.py"]) == (None, None)


@pytest.mark.parametrize("micro, expected", [
    (4.0, (128, "one epoch of the script's DataLoader: 512 batches, 4 to an optimizer step")),
    (1.0, (512, "one epoch of the script's DataLoader")),  # twin: a step per batch
    (None, (512, "one epoch of the script's DataLoader")),  # steps counted by backward
])
def test_the_planned_run_counts_optimizer_steps_under_accumulation(micro, expected):
    assert planned_run(LoaderFacts(num_batches=512), None, ["python", "train.py"], micro) == expected


def test_epochs_count_optimizer_steps_and_a_step_count_is_taken_as_given():
    loader = LoaderFacts(num_batches=64)
    assert planned_run(loader, None, ["python", "train.py", "--epochs", "3"], 4.0) == (
        48, "the script's --epochs=3 x 64 batches per epoch, 4 to an optimizer step")
    assert planned_run(loader, None, ["python", "train.py", "--max_iters=400"], 4.0) == (
        400, "the script's --max_iters=400")
