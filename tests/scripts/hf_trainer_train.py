"""A conventional Hugging Face Trainer script: a tiny GPT-2 built from a config (random
weights, nothing downloaded), synthetic tokens, ``Trainer.train()`` with its own progress bar.

``python hf_trainer_train.py [--max-steps N] [--optim NAME] [--sample-ms MS] [--output-dir DIR]
[--seen FILE] [--training-args JSON] [--threads N]``: ``--max-steps`` (default 40) is the
Trainer's ``max_steps``, 0 trains one epoch instead; ``--sample-ms`` makes each sample cost
that long to load (a decode stand-in), so the loop waits for data; ``--optim`` is the
Trainer's optimizer by name; ``--seen`` writes, at the end of training, what the Trainer
trained with as JSON: its DataLoader's settings, its optimizer's, the intra-op threads.
``--training-args`` adds ``TrainingArguments`` keywords (``torchboost export --to
transformers`` applied by hand) and ``--threads`` calls ``torch.set_num_threads``.
"""

import argparse
import json
import tempfile
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

VOCAB, CONTEXT, SAMPLES = 128, 16, 1024


class Tokens(Dataset):
    """Random token sequences; the labels are the inputs (the model shifts them)."""

    def __init__(self, sample_ms: float) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (SAMPLES, CONTEXT), generator=generator)
        self.sample_s = sample_ms / 1000.0

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> dict:
        if self.sample_s:
            time.sleep(self.sample_s)
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Seen(TrainerCallback):
    """Writes what the Trainer trained with to ``path`` when training ends."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_end(self, args, state, control, train_dataloader=None, optimizer=None, **kwargs):
        inner = getattr(optimizer, "optimizer", optimizer)  # Accelerate wraps the torch optimizer
        group = inner.param_groups[0]
        seen = {"workers": train_dataloader.num_workers, "persistent_workers": train_dataloader.persistent_workers,
                "optimizer": type(inner).__name__, "foreach": group.get("foreach"), "fused": group.get("fused"),
                "threads": torch.get_num_threads(), "steps": state.global_step}
        with open(self.path, "w") as fh:
            json.dump(seen, fh)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--optim", default="adamw_torch_fused")
    parser.add_argument("--sample-ms", type=float, default=0.0)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--seen", default=None)
    parser.add_argument("--training-args", type=json.loads, default={})
    parser.add_argument("--threads", type=int, default=None)
    options = parser.parse_args()
    if options.threads:
        torch.set_num_threads(options.threads)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=32, n_layer=1, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    settings = dict(
        output_dir=options.output_dir or tempfile.mkdtemp(prefix="hf-trainer-"),
        max_steps=options.max_steps if options.max_steps > 0 else -1, num_train_epochs=1,
        per_device_train_batch_size=8, learning_rate=1e-3, optim=options.optim, report_to="none",
        save_strategy="no", logging_steps=10, use_cpu=True, seed=0)
    args = TrainingArguments(**{**settings, **options.training_args})
    callbacks = [Seen(options.seen)] if options.seen else []
    Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens(options.sample_ms),
            callbacks=callbacks).train()


if __name__ == "__main__":
    main()
