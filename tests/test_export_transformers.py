"""``torchboost export --to transformers``: a torchboost.toml as ``TrainingArguments``
keywords, read back by ``transformers.TrainingArguments`` itself."""

from __future__ import annotations

import ast

import pytest
import torch

from torchboost import BoostConfig
from torchboost.cli import main
from torchboost.frameworks import accelerate_yaml, lightning_text, spell, transformers_text

TOML = """\
[cpu]
threads = 2
[precision]
mode = "bf16"
[loader]
num_workers = 2
pin_memory = true
[optimizer]
implementation = "fused"
[compile]
mode = "default"
[accumulation]
steps = 4
"""


def _exported(tmp_path, capsys) -> str:
    path = tmp_path / "torchboost.toml"
    path.write_text(TOML)
    assert main(["export", "--to", "transformers", "--config", str(path)]) == 0
    return capsys.readouterr().out


def _keywords(text: str) -> dict:
    calls = [node for node in ast.walk(ast.parse(text))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TrainingArguments"]
    assert len(calls) == 1, text
    return {kw.arg: ast.literal_eval(kw.value) for kw in calls[0].keywords}


def _training_arguments(tmp_path, keywords: dict):
    from transformers import TrainingArguments  # heavy: imported by the tests that need it

    # Without a GPU TrainingArguments takes bf16 only for a CPU run, as the export says.
    return TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none",
                             use_cpu=not torch.cuda.is_available(), **keywords)


def test_export_gives_keywords_training_arguments_accepts(tmp_path, capsys):
    text = _exported(tmp_path, capsys)
    keywords = _keywords(text)
    assert keywords == {"bf16": True, "torch_compile": True, "dataloader_num_workers": 2,
                        "dataloader_pin_memory": True, "gradient_accumulation_steps": 4, "optim": "adamw_torch_fused"}
    args = _training_arguments(tmp_path, keywords)
    assert (args.bf16, args.dataloader_num_workers, args.torch_compile) == (True, 2, True)
    assert str(getattr(args.optim, "value", args.optim)) == "adamw_torch_fused"
    assert args.gradient_accumulation_steps == 4
    # TrainingArguments itself turns pinning off for a CPU run (use_cpu=True).
    assert args.dataloader_pin_memory is torch.cuda.is_available()
    # What has no field is said, with the line that does it instead.
    head, no_field = text.split("has no field for these", 1)
    assert "torch.set_num_threads(2)" in no_field and "set_num_threads" not in head


def _misspelt(keywords: dict) -> None:
    keywords["dataloader_num_worker"] = keywords.pop("dataloader_num_workers")


def _unnamed_optimizer(keywords: dict) -> None:
    keywords["optim"] = "adamw_torch_foreach"  # no TrainingArguments name: foreach goes in the script


@pytest.mark.parametrize("break_it, error", [(_misspelt, TypeError), (_unnamed_optimizer, ValueError)])
def test_a_broken_keyword_is_refused(tmp_path, capsys, break_it, error):
    """The broken twin: the check above would catch an export that spelled a field wrong."""
    keywords = _keywords(_exported(tmp_path, capsys))
    break_it(keywords)
    with pytest.raises(error):
        _training_arguments(tmp_path, keywords)


@pytest.mark.parametrize("sharing, listed", [("file_system", True), ("keep", False)])  # the twin: nothing to say
def test_what_no_framework_has_a_flag_for_is_in_every_export(sharing, listed):
    spelled = spell(BoostConfig.off().replace(loader={"num_workers": 2, "sharing_strategy": sharing}))
    line = 'torch.multiprocessing.set_sharing_strategy("file_system")'
    for text in (lightning_text(spelled), accelerate_yaml(spelled), transformers_text(spelled)):
        assert (line in text) is listed, text
    assert ("dataloader_num_workers=2," in transformers_text(spelled))  # the rest has a field
