"""``torchboost run`` on a Hugging Face Trainer script: the settings reach the Trainer's own
DataLoader and optimizer (read back from inside the script), and what needs the Booster
is said, with the TrainingArguments field that does it in a Trainer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost.plan import nocode_settings

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "hf_trainer_train.py"
TOML = """\
[cpu]
threads = 1
[loader]
num_workers = 2
persistent_workers = true
[optimizer]
implementation = "foreach"
[accumulation]
steps = 2
"""


@pytest.mark.slow
@pytest.mark.parametrize("runner, applied", [(["-m", "torchboost.cli", "run", "--", "python"], True),
                                             ([], False)])  # the twin: python alone applies nothing
def test_run_applies_the_settings_to_the_trainers_loader_and_optimizer(tmp_path, runner, applied):
    (tmp_path / "torchboost.toml").write_text(TOML)
    argv = [sys.executable, *runner, str(SCRIPT), "--max-steps", "3", "--optim", "adamw_torch",
            "--output-dir", str(tmp_path / "out"), "--seen", str(tmp_path / "seen.json")]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["steps"] == 3  # the Trainer's own steps: accumulation was not applied from outside
    wanted = {"workers": 2, "persistent_workers": True, "foreach": True, "threads": 1}
    assert ({key: seen[key] for key in wanted} == wanted) is applied, seen
    said = "not applied; a Hugging Face Trainer takes TrainingArguments(gradient_accumulation_steps=2)"
    assert (said in proc.stderr) is applied
    said = "intra-op threads set to 1; DataLoader num_workers=2, persistent_workers=True; AdamW switched to foreach"
    assert (said in proc.stderr) is applied  # every setting, as it held at the first optimizer step


@pytest.mark.parametrize("setting, trainer_words", [
    ({"accumulation.steps": 4}, "; a Hugging Face Trainer takes TrainingArguments(gradient_accumulation_steps=4)"),
    ({"accumulation.micro_batch_size": "auto"}, ""),  # the twin: TrainingArguments has no field for it
])
def test_what_needs_the_booster_names_the_trainers_field_when_there_is_one(setting, trainer_words):
    applicable, notes = nocode_settings(setting)
    assert not applicable and len(notes) == 1
    assert notes[0].endswith("; not applied" + trainer_words)
