"""A Hugging Face Trainer driving the loop: found on the call stack, its TrainingArguments
described, and its run length (``max_steps``, else its epochs) taken as the planned run."""

from __future__ import annotations

import math
import sys
import types

import pytest

from torchboost.evidence.observed import Facts, LoaderFacts, TrainerFacts
from torchboost.observe.probes import describe, hf_trainer
from torchboost.observe.record.facts_builder import planned_run


def _trainer_counts(facts: TrainerFacts, loader_batches: int) -> int:
    """The Trainer's own arithmetic (Trainer.set_initial_training_values), written out."""
    if facts.max_steps > 0:
        return facts.max_steps
    per_epoch = max(loader_batches // facts.gradient_accumulation_steps
                    + int(loader_batches % facts.gradient_accumulation_steps > 0), 1)
    return math.ceil(facts.num_train_epochs * per_epoch)


def _floor_twin(facts: TrainerFacts, loader_batches: int) -> tuple[int, str]:
    """A broken twin: drops the partial accumulation window at an epoch's end."""
    if facts.max_steps > 0:
        return facts.max_steps, ""
    return int(facts.num_train_epochs * (loader_batches // facts.gradient_accumulation_steps)), ""


CASES = [(TrainerFacts(max_steps=40), 256), (TrainerFacts(num_train_epochs=3, gradient_accumulation_steps=4), 130),
         (TrainerFacts(num_train_epochs=0.5, gradient_accumulation_steps=3), 7), (TrainerFacts(num_train_epochs=2), 1)]


@pytest.mark.parametrize("length, agrees", [(TrainerFacts.run_length, True), (_floor_twin, False)])
def test_run_length_counts_as_the_trainer_does(length, agrees):
    matches = [length(facts, batches)[0] == _trainer_counts(facts, batches) for facts, batches in CASES]
    assert all(matches) is agrees


def test_run_length_says_what_gave_it():
    assert TrainerFacts(max_steps=40).run_length(256) == (40, "the Trainer's max_steps=40")
    steps, words = TrainerFacts(num_train_epochs=3, gradient_accumulation_steps=4).run_length(130)
    assert steps == 99 and words == "the Trainer's num_train_epochs=3 of 130 batches over gradient_accumulation_steps=4"
    assert TrainerFacts(counted_steps=12).run_length(None) == (12, "the Trainer's own count of its steps")
    assert TrainerFacts().run_length(None) == (None, None)


@pytest.mark.parametrize("trainer, expected", [
    (TrainerFacts(max_steps=40), (40, "the Trainer's max_steps=40")),
    (None, (256, "one epoch of the script's DataLoader")),  # the twin: no Trainer, the loader's epoch
])
def test_the_planned_run_is_the_trainers_when_one_drives_the_loop(trainer, expected):
    assert planned_run(LoaderFacts(num_batches=256), trainer) == expected


@pytest.fixture
def fake_transformers(monkeypatch):
    """A stand-in ``transformers.trainer`` module: the real one takes seconds to import."""
    module = types.ModuleType("transformers.trainer")

    class Trainer:
        def __init__(self) -> None:
            self.args = types.SimpleNamespace(max_steps=40, num_train_epochs=3.0, gradient_accumulation_steps=2,
                                              per_device_train_batch_size=8, bf16=True, optim=types.SimpleNamespace(
                                                  value="adamw_torch_fused"), dataloader_num_workers=2)
            self.state = types.SimpleNamespace(max_steps=40)

        def train(self, depth: int):
            return _nested(depth)

    module.Trainer = Trainer
    monkeypatch.setitem(sys.modules, "transformers.trainer", module)
    return module


def _nested(depth: int):
    return _nested(depth - 1) if depth > 0 else hf_trainer.find_trainer(max_depth=8)


@pytest.mark.parametrize("depth, found", [(3, True), (12, False)])  # the twin: deeper than the search
def test_the_trainer_is_found_on_the_call_stack(fake_transformers, depth, found):
    subclass = type("SFTTrainer", (fake_transformers.Trainer,), {})  # TRL's trainers derive from Trainer
    trainer = subclass()
    assert (trainer.train(depth) is trainer) is found


def test_a_trainer_is_described_by_its_training_arguments(fake_transformers):
    facts = hf_trainer.describe_trainer(type("SFTTrainer", (fake_transformers.Trainer,), {})())
    assert facts == TrainerFacts(class_name="SFTTrainer", max_steps=40, num_train_epochs=3.0,
                                 gradient_accumulation_steps=2, bf16=True, optim="adamw_torch_fused",
                                 dataloader_num_workers=2, counted_steps=40)
    round_trip = Facts.from_dict(Facts(trainer=facts, frameworks=["transformers"]).to_dict())
    assert round_trip.trainer == facts


def test_no_trainer_without_transformers_trainer_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "transformers.trainer", raising=False)
    assert hf_trainer.find_trainer() is None


@pytest.mark.parametrize("trainer, expected", [(True, ["transformers"]), (False, ["accelerate"])])
def test_the_accelerator_a_trainer_builds_is_not_the_scripts(monkeypatch, trainer, expected):
    """A Trainer builds an Accelerator of its own: the script is a Trainer script, not an
    Accelerate one (the twin: the same Accelerator without a Trainer is the script's)."""
    state = types.ModuleType("accelerate.state")
    state.PartialState = types.SimpleNamespace(_shared_state={"device": "cpu"})
    monkeypatch.setitem(sys.modules, "accelerate.state", state)
    for name in ("lightning.pytorch", "pytorch_lightning"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert describe.frameworks(trainer=trainer) == expected
