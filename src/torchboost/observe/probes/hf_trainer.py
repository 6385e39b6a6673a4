"""The Hugging Face ``transformers.Trainer`` driving the loop, found and described.

The Trainer calls ``optimizer.step()`` from its own training loop, so at the first
optimizer step one of the caller frames' ``self`` is the Trainer (or a subclass: TRL's
``SFTTrainer`` and the like). :func:`find_trainer` looks there, once; nothing is imported
or patched: a script that never imported ``transformers.trainer`` has no Trainer.
"""

from __future__ import annotations

import sys
from typing import Any

from torchboost.evidence.observed import TrainerFacts
from torchboost.observe.probes.describe import self_on_stack

__all__ = ["describe_trainer", "find_trainer"]


def find_trainer(max_depth: int = 48) -> Any | None:
    """The ``transformers.Trainer`` on the call stack (searched from the caller up,
    ``max_depth`` frames), or None; called once, from the first optimizer step."""
    trainer_type = getattr(sys.modules.get("transformers.trainer"), "Trainer", None)
    return None if trainer_type is None else self_on_stack(trainer_type, max_depth)


def _name(value: Any) -> str:
    # Enums (OptimizerNames.ADAMW_TORCH_FUSED) by their value, as TrainingArguments takes them.
    return str(getattr(value, "value", value))


def describe_trainer(trainer: Any) -> TrainerFacts:
    """``trainer``'s class and the ``TrainingArguments`` that decide the run's length and speed."""
    args = trainer.args
    state = getattr(trainer, "state", None)
    counted = getattr(state, "max_steps", 0) or None
    mode = getattr(args, "torch_compile_mode", None)
    prefetch = getattr(args, "dataloader_prefetch_factor", None)
    return TrainerFacts(
        class_name=type(trainer).__name__,
        max_steps=int(args.max_steps),
        num_train_epochs=float(args.num_train_epochs),
        gradient_accumulation_steps=int(args.gradient_accumulation_steps),
        per_device_train_batch_size=int(args.per_device_train_batch_size),
        bf16=bool(getattr(args, "bf16", False)),
        fp16=bool(getattr(args, "fp16", False)),
        tf32=getattr(args, "tf32", None),
        torch_compile=bool(getattr(args, "torch_compile", False)),
        torch_compile_mode=None if mode is None else str(mode),
        optim=_name(getattr(args, "optim", "")),
        gradient_checkpointing=bool(getattr(args, "gradient_checkpointing", False)),
        dataloader_num_workers=int(getattr(args, "dataloader_num_workers", 0)),
        dataloader_pin_memory=bool(getattr(args, "dataloader_pin_memory", True)),
        dataloader_persistent_workers=bool(getattr(args, "dataloader_persistent_workers", False)),
        dataloader_prefetch_factor=None if prefetch is None else int(prefetch),
        counted_steps=int(counted) if counted else None,
    )
