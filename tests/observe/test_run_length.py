"""The planned run's length from the script's own arguments."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from torchboost.evidence.observed import LoaderFacts
from torchboost.observe.record.facts_builder import planned_run
from torchboost.observe.probes.run_length import length_from_arguments, script_arguments
from torchboost.observe.probes.stated_length import Stated, stated_on_stack

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.mark.parametrize("argv, batches, expected", [
    (["config/train_shakespeare_char.py", "--max_iters=400", "--device=cpu"], None, (400, "the script's --max_iters=400")),
    (["--max-steps", "1000"], 64, (1000, "the script's --max-steps=1000")),
    (["--epochs", "3"], 64, (192, "the script's --epochs=3 x 64 batches per epoch")),
    (["--num_train_epochs=2", "--steps=50"], 64,  # the run ends at the first of the two
     (50, "the script's --steps=50, which ends it before the script's --num_train_epochs=2 x 64 batches per epoch "
          "would")),
    (["--max_iters=100", "--max_iters=200"], None, (200, "the script's --max_iters=200")),  # the last one, as argparse
    (["--max_train_steps", "300"], 64, (300, "the script's --max_train_steps=300")),  # HF's no_trainer examples
    (["--train-iters=900"], None, (900, "the script's --train-iters=900")),  # Megatron's spelling
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


# -- what the script set itself: its defaults, read from its frames on the stack -----------
# The helpers stand for a script's functions: no assert in them (pytest's rewritten asserts
# call locals(), and a function that may hold its locals() dict is not read).

def _parsed(argv: list[str]) -> Stated:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--log-interval", type=int, default=10)
    args = parser.parse_args(argv)  # noqa: F841 - read from this frame by stated_on_stack
    for step in range(3):  # a loop's counter named like a length is not one
        steps = step + 1  # noqa: F841
    return stated_on_stack()


def test_an_argparse_default_is_read_where_the_script_holds_it():
    assert _parsed([]) == Stated(epochs=("args.epochs = 14", 14))
    assert _parsed(["--epochs", "2"]) == Stated(epochs=("args.epochs = 2", 2))


@dataclasses.dataclass
class _Config:
    max_iters: int = 5000
    eval_iters: int = 200
    compile: bool = True


def _nanogpt_like() -> Stated:
    config = _Config()  # noqa: F841
    max_epochs = 0  # noqa: F841 - zero, a bool, a negative, a bare string: not a length
    num_epochs, n_epochs, epochs = True, -1.0, "3"  # noqa: F841
    return stated_on_stack()


def test_a_config_field_is_read_and_what_is_not_a_count_is_not():
    assert _nanogpt_like() == Stated(steps=("config.max_iters = 5000", 5000))


def _counts(after: int) -> Stated:
    total_steps = 7  # noqa: F841 - a counter: the steps run so far
    return stated_on_stack(after=after)


def test_a_counter_is_no_length_and_its_twin_a_larger_count_is():
    assert _counts(after=7) == Stated()  # read when 7 steps had run: it counts them
    assert _counts(after=3) == Stated(steps=("total_steps = 7", 7))


def _tutorial() -> Stated:
    EPOCHS = 5  # noqa: F841,N806 - a tutorial's constant
    return stated_on_stack()


def _dict_config() -> Stated:
    config = {"lr": 1e-3, "epochs": 4}  # noqa: F841
    return stated_on_stack()


def _hf_parsed() -> Stated:
    args = argparse.Namespace(num_train_epochs=3.0, max_steps=-1)  # noqa: F841 - HfArgumentParser's float epochs
    return stated_on_stack()


def _string_default() -> Stated:
    args = argparse.Namespace(epochs="3")  # noqa: F841 - a default given as a string, the script int()s it
    return stated_on_stack()


def test_what_tutorials_and_configs_write_is_read():
    assert _tutorial() == Stated(epochs=("EPOCHS = 5", 5))
    assert _dict_config() == Stated(epochs=("config['epochs'] = 4", 4))
    assert _hf_parsed() == Stated(epochs=("args.num_train_epochs = 3", 3.0))
    assert _string_default() == Stated(epochs=("args.epochs = 3", 3))


def test_frames_of_the_libraries_are_not_read():
    stdlib = sysconfig.get_paths()["stdlib"]
    code = compile("max_iters = 700\nfound = stated_on_stack(frame=sys._getframe())\n", f"{stdlib}/fake_lib.py",
                   "exec")
    scope = {"stated_on_stack": stated_on_stack, "sys": sys}
    exec(code, scope)  # a frame whose code lives in the standard library, as torch's in site-packages
    assert scope["found"] == Stated()
    user = compile("max_iters = 700\nfound = stated_on_stack(frame=sys._getframe())\n", "/home/u/train.py", "exec")
    exec(user, scope)  # twin: the same code in the user's file is read
    assert scope["found"] == Stated(steps=("max_iters = 700", 700))


def test_what_the_user_typed_comes_before_what_the_script_set_of_each_kind():
    stated = Stated(steps=("max_iters = 5000", 5000), epochs=("args.epochs = 14", 14))
    assert length_from_arguments(["--max_iters=400"], None, 1, stated) == (400, "the script's --max_iters=400")
    assert length_from_arguments(["--epochs", "2"], 10, 1, stated) == (
        20, "the script's --epochs=2 x 10 batches per epoch, which ends it before the script's max_iters = 5000 would")
    assert length_from_arguments([], None, 1, stated) == (5000, "the script's max_iters = 5000")
    assert length_from_arguments([], 10, 2, Stated(epochs=("args.epochs = 14", 14))) == (
        70, "the script's args.epochs = 14 x 10 batches per epoch, 2 to an optimizer step")
    assert length_from_arguments([], None, 1, Stated(epochs=("args.epochs = 14", 14))) is None
    loader = LoaderFacts(num_batches=64)
    assert planned_run(loader, None, ["python", "train.py"], None, Stated(epochs=("args.epochs = 3", 3))) == (
        192, "the script's args.epochs = 3 x 64 batches per epoch")
    assert planned_run(loader, None, ["python", "train.py"], None, Stated()) == (
        64, "one epoch of the script's DataLoader")  # twin: nothing set, one epoch


@pytest.mark.parametrize("argv, stated, per_step, expected", [
    # a step cap and epochs: the run ends at the first (a loop over epochs capped at max_steps)
    ([], Stated(("args.max_steps = 1000", 1000), ("args.epochs = 3", 3)), 1, 48),
    (["--epochs", "100"], Stated(("args.max_steps = 1000", 1000), ("args.epochs = 3", 3)), 1, 1000),
    # one epoch's steps (num_steps = len(loader)) beside the epochs: the epochs decide
    ([], Stated(("num_steps = 16", 16), ("num_epochs = 5", 5)), 1, 80),
    # a count of batches (total_steps = epochs * len(loader)) under accumulation by 4: 12 updates
    ([], Stated(("total_steps = 48", 48), ("epochs = 3", 3)), 4, 12),
    # a diffusion model's 1000 noise steps are not the run's: its 3 epochs end it first
    ([], Stated(("n_steps = 1000", 1000), ("n_epochs = 3", 3)), 1, 48),
    ([], Stated(epochs=("args.num_train_epochs = 3", 3.0)), 1, 48),
    ([], Stated(epochs=("args.num_train_epochs = 0.5", 0.5)), 1, 8),
])
def test_a_step_count_beside_epochs_gives_the_first_end(argv, stated, per_step, expected):
    assert length_from_arguments(argv, 16, per_step, stated)[0] == expected


def test_a_lightning_trainer_s_plan_decides_alone():
    loader = LoaderFacts(num_batches=16)
    plan = ("the Lightning Trainer's max_epochs=3 of 5 batches", 15)
    stated = Stated(steps=("max_steps = 1000", 1000), epochs=("epochs = 9", 9), trainer=plan)
    assert planned_run(loader, None, ["python", "train.py", "--epochs=2"], None, stated) == (15, plan[0])


@pytest.mark.slow
def test_the_doctor_reads_an_argparse_default_the_user_did_not_type(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5", "--warmup", "2",
                           "--out", str(out), "--", "python", str(SCRIPTS / "epochs_default.py")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads((out / "facts.json").read_text())
    # 3 epochs by the script's default, 16 batches each: not the one epoch of before
    assert (facts["planned_steps"], facts["planned_from"]) == (
        48, "the script's args.epochs = 3 x 16 batches per epoch")
