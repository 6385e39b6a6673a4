"""A Hugging Face ``transformers.Trainer`` driving the loop, as plain data: the arguments
that decide the run's length and speed (read by :mod:`torchboost.observe.probes.hf_trainer`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["TrainerFacts"]


@dataclass
class TrainerFacts:
    """A Hugging Face ``transformers.Trainer`` (or a subclass, e.g. TRL's) driving the loop:
    the ``TrainingArguments`` it trains with that decide the run's length and speed."""

    class_name: str = "Trainer"
    max_steps: int = -1
    """``max_steps``; 0 or less: the run is ``num_train_epochs`` long."""
    num_train_epochs: float = 3.0
    gradient_accumulation_steps: int = 1
    per_device_train_batch_size: int = 8
    bf16: bool = False
    fp16: bool = False
    tf32: bool | None = None
    """None: the Trainer leaves torch's TF32 setting as it is."""
    torch_compile: bool = False
    torch_compile_mode: str | None = None
    optim: str = ""
    """``optim`` by name ("adamw_torch_fused", "adamw_torch", ...)."""
    gradient_checkpointing: bool = False
    dataloader_num_workers: int = 0
    dataloader_pin_memory: bool = True
    dataloader_persistent_workers: bool = False
    dataloader_prefetch_factor: int | None = None
    counted_steps: int | None = None
    """The Trainer's own count of the run's optimizer steps (``TrainerState.max_steps``),
    when it had counted them; used where the loader's length is unknown."""

    def run_length(self, loader_batches: int | None) -> tuple[int | None, str | None]:
        """The optimizer steps the Trainer runs, and what gave them in words: ``max_steps``
        when positive, else ``num_train_epochs`` epochs of ``loader_batches`` batches,
        ``gradient_accumulation_steps`` batches to a step (a partial window ends an epoch,
        as the Trainer counts it); (None, None) when neither is known."""
        if self.max_steps > 0:
            return self.max_steps, f"the Trainer's max_steps={self.max_steps}"
        accumulation = max(1, self.gradient_accumulation_steps)
        if loader_batches:
            per_epoch = max(1, math.ceil(loader_batches / accumulation))
            words = f"the Trainer's num_train_epochs={self.num_train_epochs:g} of {loader_batches} batches"
            if accumulation > 1:
                words += f" over gradient_accumulation_steps={accumulation}"
            return math.ceil(self.num_train_epochs * per_epoch), words
        if self.counted_steps:
            return self.counted_steps, "the Trainer's own count of its steps"
        return None, None
