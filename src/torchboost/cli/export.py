"""Print a torchboost.toml in a framework's own words: Lightning, Accelerate or the
Hugging Face Trainer.

``torchboost export --to lightning [--config torchboost.toml]`` prints the
``lightning.Trainer(...)`` arguments (``precision="bf16-mixed"``,
``accumulate_grad_batches=K``, ``benchmark=True``) and the lines to add for what the
Trainer has no flag for (compile, threads, loader settings). ``--to accelerate`` prints
an ``accelerate`` config file (``mixed_precision``, ``dynamo_config``) with the
``Accelerator(gradient_accumulation_steps=K)`` and other lines it has no key for.
``--to transformers`` prints the ``TrainingArguments(...)`` keyword arguments
(``bf16=True``, ``dataloader_num_workers=2``, ``optim="adamw_torch_fused"``,
``torch_compile=True``, ``gradient_accumulation_steps=K``) and the lines to add for what
it has no field for (threads, cuDNN's autotuner, channels_last).
Only what differs from plain PyTorch is printed; ``"auto"`` values are named, since
torchboost decides them on the machine the script runs on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torchboost.config import CONFIG_FILENAME, BoostConfig, ConfigError
from torchboost.config_files import find_config
from torchboost.frameworks import FRAMEWORKS, accelerate_yaml, lightning_text, spell, transformers_text

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``torchboost export``."""
    parser.add_argument("--to", required=True, choices=FRAMEWORKS, help="the framework to write for")
    parser.add_argument("--config", default=None, help="configuration to export (default: this folder's "
                                                       "torchboost.toml or [tool.torchboost] in pyproject.toml)")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``torchboost export``; prints to stdout, returns 0 (2 on bad input)."""
    if args.command:
        print("torchboost export: error: export takes no command after --; it reads --config", file=sys.stderr)
        return 2
    try:
        path = Path(args.config) if args.config is not None else find_config() or Path(CONFIG_FILENAME)
        if not path.is_file():
            raise ConfigError(f"{path}: no such file; write one with 'torchboost tune -- python train.py'")
        config = BoostConfig.from_toml(path)
    except ConfigError as exc:
        print(f"torchboost export: error: {exc}", file=sys.stderr)
        return 2
    writers = {"lightning": lightning_text, "accelerate": accelerate_yaml, "transformers": transformers_text}
    sys.stdout.write(writers[args.to](spell(config)))
    return 0
