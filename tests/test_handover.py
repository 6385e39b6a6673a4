"""The claims: one explicit object, given to the applier and the recorder, claimed by a Booster."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchboost
from torchboost import handover
from torchboost.config import BoostConfig, ConfigError
from torchboost.handover import Claims, process_claims
from torchboost.observe import ObserveSpec, StepRecorder
from torchboost.nocode import Applier
from torchboost.plan import Plan


def test_claims_grow_and_answer():
    claims = Claims()
    assert not claims.claimed("compile") and claims.names() == frozenset()
    claims.claim(["compile", "precision"])
    assert claims.claimed("compile") and claims.names() == {"compile", "precision"}


def test_a_booster_claims_in_the_process_claims(tmp_path, monkeypatch):
    # A fresh process's claims: an earlier test's Booster has claimed in this process's.
    monkeypatch.setattr(handover, "_PROCESS_CLAIMS", Claims())
    claims = process_claims()
    assert process_claims() is claims  # one per process
    recorder = StepRecorder(ObserveSpec(out_dir=str(tmp_path), profile_active=0), claims=claims)
    own = StepRecorder(ObserveSpec(out_dir=str(tmp_path), profile_active=0))  # a Claims of its own
    model = nn.Linear(2, 1)
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert claims.claimed("precision")
    assert recorder.uses_booster and recorder.facts().uses_booster
    assert not own.uses_booster  # the twin: a recorder not given the process's claims sees no Booster


def _forward_patched(claims: Claims | None) -> bool:
    model = nn.Linear(8, 2)
    applier = Applier(Plan.applying({"precision.mode": "bf16"}), claims=claims).install()
    try:
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
    finally:
        applier.uninstall()
    return "forward" in model.__dict__


def test_the_applier_stands_down_for_what_a_booster_claimed():
    claims = Claims()
    claims.claim(["precision"])
    assert not _forward_patched(claims)
    assert _forward_patched(Claims())  # the twin: nothing claimed, so the applier applies bf16


def test_a_trial_reads_its_plan_once_and_keeps_it(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    plan = Plan.of(BoostConfig.off().replace(precision={"mode": "bf16"}, accumulation={"steps": 2}))
    handover.write_plan(path, plan)
    monkeypatch.setenv(handover.TRIAL_SETTINGS_ENV, str(path))
    monkeypatch.setattr(handover, "_READ", {})
    assert handover.trial_plan() == plan and plan.apply == {"precision.mode": "bf16"}
    path.write_text("not a plan")
    assert handover.trial_plan() == plan  # the process's applier and its Booster share one read
    monkeypatch.setattr(handover, "_READ", {})  # the twin: a fresh process reads the file as it now is
    with pytest.raises(ConfigError, match="TORCHBOOST_TRIAL_SETTINGS"):
        handover.trial_plan()
