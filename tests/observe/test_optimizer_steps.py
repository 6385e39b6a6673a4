"""A second optimizer (a GAN's critic, stepped every 5th step) is recorded and reported."""

from __future__ import annotations

import pytest
import torch

from torchboost.evidence.observed import Facts
from torchboost.observe import ObserveSpec, StepRecorder, StopObserving
from torchboost.report.doctor_report import optimizer_notes


def _gan_facts(tmp_path, *, critic_every: int | None) -> Facts:
    """A recorder fed a GAN-like loop: the generator steps every step, the critic every
    ``critic_every``-th (None: no critic)."""
    rec = StepRecorder(ObserveSpec(out_dir=str(tmp_path), steps=10, warmup=2, profile_active=0))
    model = torch.nn.Linear(2, 1)
    generator = torch.optim.Adam(model.parameters())
    critic = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(20):
        try:
            rec.optimizer_begin(generator)
            rec.optimizer_done(generator)
        except StopObserving:
            break
        if critic_every and step % critic_every == 0:
            rec.optimizer_begin(critic)
            rec.optimizer_done(critic)
    return rec.facts()


def test_a_second_optimizer_is_counted_apart_from_the_training_steps(tmp_path):
    facts = _gan_facts(tmp_path, critic_every=5)
    assert facts.optimizers == [{"class_name": "Adam", "steps": 12, "primary": True},
                                {"class_name": "SGD", "steps": 3, "primary": False}]
    assert facts.steps_seen == 12  # the critic's steps are not training steps
    assert Facts.from_dict(facts.to_dict()).optimizers == facts.optimizers  # survives facts.json
    [note] = optimizer_notes(facts)
    assert "A second optimizer stepped too: SGD, 3 steps while Adam" in note


@pytest.mark.parametrize("critic_every", [None, 5])
def test_the_twin_one_optimizer_gets_no_note(tmp_path, critic_every):
    facts = _gan_facts(tmp_path, critic_every=critic_every)
    assert (len(optimizer_notes(facts)) == 1) is (critic_every is not None)
