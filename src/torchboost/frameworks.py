"""A torchboost configuration in plain PyTorch's and in a framework's own words.

Each technique says how its setting is spelled (``Technique.spell``); this module
gathers those spellings for a whole configuration, or for one finding's fix (its
``torchboost.toml`` lines, its plain-PyTorch lines, ``lightning.Trainer`` arguments, an
``accelerate`` config, ``transformers.TrainingArguments`` keywords), and writes them as
``lightning.Trainer(...)`` arguments, an ``accelerate`` config file or
``TrainingArguments(...)`` keywords, with the lines to add by hand where the framework has
no flag. Only what differs from
plain PyTorch is exported; ``"auto"`` values are decided by torchboost at run time from
the hardware, so they are named, not guessed.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from typing import Any

import tomli_w

from torchboost.config import AUTO, BoostConfig, Overlay, section_classes
from torchboost.techniques.registry import FrameworkSpelling, techniques


__all__ = ["FRAMEWORKS", "Spelled", "accelerate_yaml", "finding_words", "fix_toml", "fix_torch", "fix_words", "lightning_text", "spell", "training_arguments",
           "transformers_text"]

FRAMEWORKS = ("lightning", "accelerate", "transformers")
"""The frameworks ``torchboost export --to`` writes for."""


@dataclass(frozen=True)
class Spelled:
    """A configuration's settings, gathered from every technique's spelling."""

    words: FrameworkSpelling
    """Every technique's flags merged: Trainer arguments, config-file keys, Accelerator()."""
    lightning_code: tuple[str, ...] = ()
    """Lines a Lightning user adds for what the Trainer has no flag for."""
    accelerate_code: tuple[str, ...] = ()
    """Lines an Accelerate user adds for what neither the file nor Accelerator() takes."""
    transformers_code: tuple[str, ...] = ()
    """Lines a Hugging Face Trainer user adds for what TrainingArguments has no field for."""
    at_run_time: tuple[str, ...] = ()
    """Settings left ``"auto"``: torchboost decides them when the script runs."""
    torch_code: tuple[str, ...] = ()
    """Every setting in plain PyTorch, in application order."""


def spell(config: BoostConfig | Overlay) -> Spelled:
    """The settings of ``config`` that differ from plain PyTorch, in each framework's words."""
    plain = BoostConfig.off()
    changes = Overlay.between(plain, config) if isinstance(config, BoostConfig) else config
    values = changes.to_dict()
    decided = Overlay({k: v for k, v in values.items() if v != AUTO})
    effective = decided.on(plain)
    merged = FrameworkSpelling()
    lightning_code: list[str] = []
    accelerate_code: list[str] = []
    transformers_code: list[str] = []
    torch_code: list[str] = []
    for technique in techniques():
        if technique.spell is None or technique.section is None or not decided.section(technique.section):
            continue
        words = technique.spell(getattr(effective, technique.section.section))
        for name in ("lightning", "accelerate", "accelerator", "transformers"):
            getattr(merged, name).update({k: v for k, v in getattr(words, name).items() if v is not None})
        lightning_code += [line for line in words.code if _needed(line, words.lightning)]
        accelerate_code += [line for line in words.code if _needed(line, {**words.accelerate, **words.accelerator})]
        # TrainingArguments' tf32 field sets the matmul precision too: no exception here.
        transformers_code += [] if any(v is not None for v in words.transformers.values()) else words.code
        torch_code += words.code
        for lines in (lightning_code, accelerate_code, transformers_code, torch_code):
            lines += words.unflagged
    at_run_time = tuple(k for k, v in values.items() if v == AUTO)
    return Spelled(merged, tuple(lightning_code), tuple(accelerate_code), tuple(transformers_code),
                   at_run_time, tuple(torch_code))


def _needed(line: str, flags: dict[str, Any]) -> bool:
    # A technique's code line is its plain-PyTorch form; a framework with a flag for the
    # same setting needs it only when the flag does not cover it (tf32's matmul line).
    return not flags or all(v is None for v in flags.values()) or "set_float32_matmul_precision" in line


def lightning_text(spelled: Spelled) -> str:
    """Python a Lightning user pastes: the ``Trainer(...)`` arguments, then the extra lines."""
    lines = ["# torchboost.toml for Lightning: pass these to your Trainer", "trainer = lightning.Trainer("]
    lines += [f"    {key}={value!r}," for key, value in spelled.words.lightning.items()]
    lines += ["    # ... your other Trainer arguments", ")"]
    if spelled.lightning_code:
        lines += ["# The Trainer has no flag for these: add them to your script (before trainer.fit)"]
        lines += list(spelled.lightning_code)
    lines += _run_time_note(spelled)
    return "\n".join(lines) + "\n"


def accelerate_yaml(spelled: Spelled) -> str:
    """An ``accelerate`` config file (``accelerate launch --config_file FILE train.py``)."""
    keys = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "NO", "num_processes": 1,
            **spelled.words.accelerate}
    lines = ["# torchboost.toml for Accelerate: accelerate launch --config_file THIS_FILE train.py"]
    for key, value in keys.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {json.dumps(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    extra = [f"accelerator = Accelerator({', '.join(f'{k}={v!r}' for k, v in spelled.words.accelerator.items())})"] \
        if spelled.words.accelerator else []
    extra += list(spelled.accelerate_code)
    if extra:
        lines.append("# The config file has no key for these: add them to your script")
        lines += [f"#   {line}" for line in extra]
    lines += _run_time_note(spelled)
    return "\n".join(lines) + "\n"


def transformers_text(spelled: Spelled) -> str:
    """Python a Hugging Face Trainer user pastes: the ``TrainingArguments(...)`` keywords,
    then the lines for what it has no field for (before ``trainer.train()``)."""
    lines = ["# torchboost.toml for the Hugging Face Trainer: pass these to your TrainingArguments",
             "args = TrainingArguments("]
    lines += [f"    {key}={value!r}," for key, value in spelled.words.transformers.items()]
    lines += ["    # ... your other TrainingArguments (output_dir, ...)", ")"]
    if spelled.words.transformers.get("bf16") or spelled.words.transformers.get("fp16"):
        lines += ["# Without a CUDA GPU, TrainingArguments takes bf16/fp16 only with use_cpu=True as well"]
    if spelled.transformers_code:
        lines += ["# TrainingArguments has no field for these: add them to your script (before trainer.train()),",
                  "# or let torchboost run -- python train.py apply them from outside"]
        lines += list(spelled.transformers_code)
    lines += _run_time_note(spelled)
    return "\n".join(lines) + "\n"


def _run_time_note(spelled: Spelled) -> list[str]:
    if not spelled.at_run_time:
        return []
    text = (f'Not exported: {len(spelled.at_run_time)} settings are "auto", decided by torchboost on the '
            f"machine that runs the script: {', '.join(spelled.at_run_time)}")
    return textwrap.wrap(text, width=79, initial_indent="# ", subsequent_indent="#   ", break_on_hyphens=False)


def toml_lines(settings: Overlay) -> str:
    """``settings`` as ``torchboost.toml`` tables, in the file's (application) order."""
    tables: dict[str, dict[str, Any]] = {}
    for name, cls in section_classes().items():
        if settings.section(cls):
            tables[name] = settings.section(cls)
    return tomli_w.dumps(tables).strip()


def finding_words(finding: Any) -> dict[str, str]:
    """A :class:`~torchboost.evidence.findings.Finding`'s fix in every spelling (:func:`fix_words`):
    the finding holds its fix as settings; rendering them is the techniques' (here), not the
    evidence's."""
    return fix_words(finding.fix, finding.advice, finding.advice_code)


def fix_toml(finding: Any) -> str:
    """A finding's fix as a ``torchboost.toml`` fragment (comments only when no key applies it)."""
    return finding_words(finding)["toml"]


def fix_torch(finding: Any) -> str:
    """A finding's fix written in plain PyTorch."""
    return finding_words(finding)["torch"]


def fix_words(fix: Overlay, advice: str = "", advice_code: str = "") -> dict[str, str]:
    """A finding's fix in every spelling, rendered from the techniques' own: "toml" (valid
    ``torchboost.toml``; ``advice`` as a comment), "torch" (plain PyTorch, then
    ``advice_code``) and, where a framework has a flag, "lightning", "accelerate" and
    "transformers" (``TrainingArguments`` keywords)."""
    comment = "".join(f"\n# {line}" for line in advice.splitlines()) if fix else f"# no torchboost.toml key: {advice}"
    spelled = spell(fix)
    torch_lines = [*spelled.torch_code, *([advice_code] if advice_code else [])]
    words = {"toml": (toml_lines(fix) + comment).strip(), "torch": "\n".join(torch_lines)}
    words.update(_framework_words(spelled))
    return words


def _framework_words(spelled: Spelled) -> dict[str, str]:
    words: dict[str, str] = {}
    lightning = [f"{k}={v!r}" for k, v in spelled.words.lightning.items()]
    if lightning or spelled.lightning_code:
        words["lightning"] = "; ".join(([f"Trainer({', '.join(lightning)})"] if lightning else [])
                                       + list(spelled.lightning_code))
    accelerate = [f"{k}: {json.dumps(v)}" for k, v in spelled.words.accelerate.items()]
    accelerate += [f"Accelerator({k}={v!r})" for k, v in spelled.words.accelerator.items()]
    if accelerate or spelled.accelerate_code:
        words["accelerate"] = "; ".join(accelerate + list(spelled.accelerate_code))
    if spelled.words.transformers:
        words["transformers"] = training_arguments(spelled)
    return words


def training_arguments(spelled: Spelled) -> str:
    """The ``TrainingArguments(...)`` call with ``spelled``'s keywords, on one line."""
    return spelled.words.training_arguments() or "TrainingArguments()"
