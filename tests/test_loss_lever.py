"""The loss-level hook: a technique that declares ``Technique.loss`` gets the criterion
handed to ``Booster.prepare(..., criterion=)``; one that does not never sees it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torchboost
import torchboost.booster as booster_module
from torchboost import BoostConfig
from torchboost.techniques.registry import Technique, techniques


class _Counting:
    """A criterion that counts its calls around the one it wraps (a stand-in for a fused loss)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.inner(*args, **kwargs)


def _with_levers(monkeypatch, seen: list) -> None:
    def lever(prep, criterion):
        seen.append(("lever", prep.model, criterion))
        return _Counting(criterion)

    def plain_apply(prep):
        seen.append(("plain", prep.model))

    declaring = Technique("fake_loss", "a loss lever", apply=lambda prep: None, loss=lever)
    plain = Technique("fake_plain", "no loss lever", apply=plain_apply)
    monkeypatch.setattr(booster_module, "techniques", lambda: [*techniques(), declaring, plain])


def _prepare(criterion=None):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if criterion is None:
        return model, booster.prepare(model, optimizer)
    return model, booster.prepare(model, optimizer, criterion=criterion)


def _check_lever_reached(monkeypatch) -> None:
    seen: list = []
    _with_levers(monkeypatch, seen)
    criterion = nn.MSELoss()
    model, (prepared, optimizer, boosted) = _prepare(criterion)
    assert ("lever", model, criterion) in seen, "the declaring technique never got the criterion"
    assert [s for s in seen if s[0] == "plain"] == [("plain", model)]  # apply as ever, no criterion
    assert isinstance(boosted, _Counting) and boosted.inner is criterion
    loss = boosted(prepared(torch.ones(3, 4)), torch.zeros(3, 2))
    loss.backward()
    optimizer.step()
    assert boosted.calls == 1


def test_a_technique_declaring_the_loss_hook_gets_the_criterion(monkeypatch):
    _check_lever_reached(monkeypatch)


def test_the_loss_hook_check_fails_when_prepare_ignores_the_declaration(monkeypatch):
    """The broken twin: a Booster that never hands the criterion on must not pass."""
    monkeypatch.setattr(booster_module, "_loss_levers", lambda registry, prep, criterion: criterion)
    with pytest.raises(AssertionError, match="never got the criterion"):
        _check_lever_reached(monkeypatch)


def test_without_a_criterion_no_lever_runs_and_the_result_is_as_before(monkeypatch):
    seen: list = []
    _with_levers(monkeypatch, seen)
    model, result = _prepare()
    assert len(result) == 2 and [s[0] for s in seen] == ["plain"]


def test_no_registered_technique_changes_the_criterion_yet():
    assert [t.name for t in techniques() if t.loss is not None] == []
    criterion = nn.CrossEntropyLoss()
    _, (_, _, back) = _prepare(criterion)
    assert back is criterion
