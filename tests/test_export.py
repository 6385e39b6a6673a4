"""``torchboost export``: the configuration as Lightning and Accelerate spell it, read back
by the frameworks themselves."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from torchboost import BoostConfig
from torchboost.config import Overlay
from torchboost.frameworks import accelerate_yaml, fix_words, lightning_text, spell
from torchboost.techniques.precision import PrecisionConfig

TUNED = BoostConfig.off().replace(precision={"mode": "bf16"}, accumulation={"steps": 4},
                                  compile={"mode": "default"}, cpu={"threads": 1}, loader={"num_workers": 2})


def _trainer_kwargs(text: str) -> dict:
    calls = [node for node in ast.walk(ast.parse(text))
             if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "Trainer"]
    assert len(calls) == 1, text
    return {kw.arg: ast.literal_eval(kw.value) for kw in calls[0].keywords}


def _trainer(text: str):
    lightning = pytest.importorskip("lightning")
    return lightning.Trainer(**_trainer_kwargs(text), accelerator="cpu", devices=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)


def test_lightning_export_builds_a_real_trainer_with_the_settings():
    text = lightning_text(spell(TUNED))
    trainer = _trainer(text)
    assert trainer.accumulate_grad_batches == 4
    assert trainer.precision == "bf16-mixed"
    # what the Trainer has no flag for is written as code, and parses
    assert "model = torch.compile(model)" in text and "torch.set_num_threads(1)" in text
    assert "num_workers=2" in text


def test_lightning_read_back_tells_configs_apart():
    """The broken twin: another accumulation must not read back as this one."""
    other = TUNED.replace(accumulation={"steps": 2})
    assert _trainer(lightning_text(spell(other))).accumulate_grad_batches != 4


def test_accelerate_export_is_a_config_file_accelerate_loads(tmp_path):
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    path = tmp_path / "accelerate.yaml"
    text = accelerate_yaml(spell(TUNED))
    path.write_text(text)
    loaded = config_args.ClusterConfig.from_yaml_file(yaml_file=str(path))  # rejects unknown keys
    assert loaded.mixed_precision == "bf16"
    assert loaded.dynamo_config == {"dynamo_backend": "INDUCTOR", "dynamo_mode": "default"}
    assert "Accelerator(gradient_accumulation_steps=4)" in text  # the file has no key for it


def test_plain_config_exports_nothing_but_names_the_auto_settings():
    spelled = spell(BoostConfig.off())
    assert not spelled.words.lightning and not spelled.words.accelerate and not spelled.at_run_time
    auto = spell(BoostConfig())
    assert "precision.mode" in auto.at_run_time and not auto.words.lightning
    assert all(len(line) <= 80 for line in lightning_text(auto).splitlines())


def test_a_findings_fix_is_spelled_for_every_framework_from_its_settings():
    words = fix_words(Overlay.of(PrecisionConfig, mode="bf16"))
    assert words == {"toml": '[precision]\nmode = "bf16"',
                     "torch": "with torch.autocast(device.type, dtype=torch.bfloat16):\n    loss = criterion(model(x), y)",
                     "lightning": "Trainer(precision='bf16-mixed')", "accelerate": 'mixed_precision: "bf16"',
                     "transformers": "TrainingArguments(bf16=True)"}
    no_key = fix_words(Overlay(), "the syncs are in the training script", "loss.detach()")
    assert no_key == {"toml": "# no torchboost.toml key: the syncs are in the training script", "torch": "loss.detach()"}


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", [
    (["export", "--to", "lightning", "--config", "missing.toml"], "missing.toml: no such file"),
    (["export", "--to", "keras"], "invalid choice"),
])
def test_export_bad_input_is_one_line_exit_2(tmp_path, argv, message):
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", *argv], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 3


@pytest.mark.slow
def test_export_command_prints_the_file_it_reads(tmp_path):
    TUNED.to_toml(tmp_path / "torchboost.toml")
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "export", "--to", "lightning"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert _trainer_kwargs(proc.stdout) == {"precision": "bf16-mixed", "accumulate_grad_batches": 4}
