"""After tune, the way to use torchboost.toml that fits the script."""

from __future__ import annotations

import pytest

from torchboost import BoostConfig
from torchboost.diagnose import Facts
from torchboost.tune.report_data import next_step

COMMAND = ["torchrun", "--nproc-per-node", "2", "train.py", "--data", "my data"]


def test_a_plain_script_is_pointed_at_torchboost_run_with_its_own_command():
    step = next_step(Facts(), COMMAND)
    assert step["how"] == "run"
    assert step["text"] == "torchboost run -- torchrun --nproc-per-node 2 train.py --data 'my data'"


def test_a_file_written_elsewhere_than_this_folder_is_named(tmp_path, monkeypatch):
    # the demo writes torchboost-demo/torchboost.toml: `torchboost run` here would not find it.
    # Twin: the folder's own torchboost.toml, which run finds, needs no --config.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "torchboost-demo").mkdir()
    elsewhere = tmp_path / "torchboost-demo" / "torchboost.toml"
    elsewhere.write_text("[cpu]\nthreads = 1\n")
    step = next_step(Facts(), ["python", "train.py"], config_path=elsewhere)
    assert step["text"] == "torchboost run --config torchboost-demo/torchboost.toml -- python train.py"
    (tmp_path / "torchboost.toml").write_text("[cpu]\nthreads = 1\n")
    here = next_step(Facts(), ["python", "train.py"], config_path=tmp_path / "torchboost.toml")
    assert here["text"] == "torchboost run -- python train.py"


def test_a_booster_script_reads_the_file_itself():
    assert next_step(Facts(uses_booster=True), COMMAND)["how"] == "booster"


def test_lightning_and_accelerate_scripts_get_the_export():
    lightning = next_step(Facts(frameworks=["lightning"], uses_booster=False), COMMAND)
    assert lightning["how"] == "lightning" and "torchboost export --to lightning" in lightning["text"]
    accelerate = next_step(Facts(frameworks=["accelerate"]), COMMAND)
    assert accelerate["how"] == "accelerate" and "torchboost export --to accelerate" in accelerate["text"]


def test_this_interpreter_is_said_as_python():
    import sys

    step = next_step(Facts(), [sys.executable, "-m", "pkg.train"])
    assert step["text"] == "torchboost run -- python -m pkg.train"


TUNED = BoostConfig.off().replace(loader={"num_workers": 2}, optimizer={"implementation": "fused"}, cpu={"threads": 1})


@pytest.mark.parametrize("frameworks, how", [(["transformers"], "transformers"), ([], "run")])  # the twin: no Trainer
def test_a_trainer_script_gets_its_training_arguments_and_torchboost_run(frameworks, how):
    step = next_step(Facts(frameworks=frameworks), ["python", "train.py"], TUNED)
    assert step["how"] == how
    arguments = "TrainingArguments(dataloader_num_workers=2, optim='adamw_torch_fused') in your script"
    assert (arguments in step["text"]) is (how == "transformers")
    assert step["text"].endswith("torchboost run -- python train.py")
    # the threads have no TrainingArguments field: the export says how
    assert ("torchboost export --to transformers" in step["text"]) is (how == "transformers")


def test_a_trainer_script_with_nothing_to_set_is_pointed_at_torchboost_run():
    step = next_step(Facts(frameworks=["transformers"]), ["python", "train.py"], BoostConfig.off())
    assert step == {"how": "run", "text": "torchboost run -- python train.py"}
