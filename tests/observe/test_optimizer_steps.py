"""A second optimizer (a GAN's critic, stepped every 5th step) is recorded and reported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchboost.evidence.observed import Facts, optimizer_label
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
    assert facts.optimizers == [{"class_name": "Adam", "stepping": "model", "steps": 12, "primary": True},
                                {"class_name": "SGD", "stepping": "model", "steps": 3, "primary": False}]
    assert facts.steps_seen == 12  # the critic's steps are not training steps
    assert Facts.from_dict(facts.to_dict()).optimizers == facts.optimizers  # survives facts.json
    [note] = optimizer_notes(facts)
    assert "A second optimizer stepped too: SGD (model), 3 steps while Adam (model)" in note


@pytest.mark.parametrize("critic_every", [None, 5])
def test_the_twin_one_optimizer_gets_no_note(tmp_path, critic_every):
    facts = _gan_facts(tmp_path, critic_every=critic_every)
    assert (len(optimizer_notes(facts)) == 1) is (critic_every is not None)


class _Gan(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Linear(4, 2))
        self.discriminator = torch.nn.Linear(2, 1)


def _labels(tmp_path, optimizers, roots=()) -> list[str]:
    rec = StepRecorder(ObserveSpec(out_dir=str(tmp_path), steps=10, warmup=2, profile_active=0))
    for _root in roots:  # a name with "_" is no name of the script's
        rec.forward_begin(_root, ())
    for optimizer in optimizers:
        rec.optimizer_begin(optimizer)
        rec.optimizer_done(optimizer)
    return [optimizer_label(o) for o in rec.facts().optimizers]


# The scripts below are plain functions, as a user's main() is: a test function's own locals
# are not read, since pytest's rewritten asserts call locals() in it (see frames.frame_locals).

def _gan_script(tmp_path) -> list[str]:
    generator, discriminator = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
    g_opt, d_opt = torch.optim.Adam(generator.parameters()), torch.optim.Adam(discriminator.parameters())
    return _labels(tmp_path, [g_opt, d_opt])


def test_each_optimizer_is_named_by_what_it_steps(tmp_path):
    assert _gan_script(tmp_path) == ["Adam (generator)", "Adam (discriminator)"]


def _submodule_script(tmp_path) -> tuple[list[str], list[str]]:
    gan = _Gan()
    optimizers = [torch.optim.Adam(gan.generator.parameters()), torch.optim.Adam(gan.discriminator.parameters()),
                  torch.optim.SGD(gan.parameters(), lr=0.1)]
    named = _labels(tmp_path / "a", optimizers)
    roots = [_Gan()]  # held in a list: no name of the script's is the module, only the loop's call
    optimizers = [torch.optim.Adam(roots[0].generator.parameters()), torch.optim.SGD(roots[0].parameters(), lr=0.1)]
    return named, _labels(tmp_path / "b", optimizers, roots=roots)


def test_a_submodule_is_named_by_its_attribute_and_a_root_seen_only_by_the_loop_by_its_class(tmp_path):
    named, by_the_loop = _submodule_script(tmp_path)
    assert named == ["Adam (generator)", "Adam (discriminator)", "SGD (gan)"]
    assert by_the_loop == ["Adam (generator)", "SGD (_Gan)"]


def _one_model_script(tmp_path) -> list[str]:
    model = torch.nn.Linear(2, 1)
    return _labels(tmp_path, [torch.optim.Adam(model.parameters()), torch.optim.Adam(model.parameters())])


def test_the_twin_two_optimizers_over_one_model_have_the_same_label(tmp_path):
    # nothing tells them apart: the report says so by the name
    assert _one_model_script(tmp_path) == ["Adam (model)", "Adam (model)"]


def _holding_locals(tmp_path) -> list[str]:
    generator = torch.nn.Linear(8, 8)
    hparams = locals()  # a script that logs its locals: they are not read, so this dict stays as it is
    labels = _labels(tmp_path, [torch.optim.Adam(generator.parameters())])
    assert list(hparams) == ["tmp_path", "generator"], hparams
    return labels


def test_twin_a_function_holding_its_locals_is_not_read(tmp_path):
    assert _holding_locals(tmp_path) == ["Adam"]  # its class: the name was not read


@pytest.mark.slow
def test_the_doctor_names_a_gans_two_adams_by_what_they_step(tmp_path):
    script = Path(__file__).resolve().parents[1] / "scripts" / "gan_two_optimizers.py"
    argv = [sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5", "--warmup", "2",
            "--out", str(tmp_path / "report"), "--", "python", str(script)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "A second optimizer stepped too: Adam (critic)" in proc.stdout
    assert "while Adam (generator) (whose steps are the training steps)" in proc.stdout
