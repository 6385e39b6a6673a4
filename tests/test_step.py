"""The training step on its own, without the Booster: plain PyTorch when everything is off,
and a window of K micro-steps that steps once."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchboost.step import TrainStep
from torchboost.techniques.accumulation import Accumulator
from torchboost.techniques.precision import make_precision

STEPS = 5


def _problem():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    g = torch.Generator().manual_seed(1)
    return model, torch.randn(STEPS, 8, 6, generator=g), torch.randint(0, 3, (STEPS, 8), generator=g)


def _plain(lr: float = 0.1) -> nn.Module:
    model, xs, ys = _problem()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for x, y in zip(xs, ys):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


def _stepped() -> nn.Module:
    model, xs, ys = _problem()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    step = TrainStep(make_precision("fp32", "cpu"), Accumulator(1), optimizer)
    for x, y in zip(xs, ys):
        with step.micro_step(model, num_samples=len(x)):
            with step.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            step.backward(loss)
            assert step.step(optimizer) is True
            step.zero_grad(optimizer)
    assert step.step_counts() == {"real": STEPS, "skipped": 0}
    return model


def _assert_same(a: nn.Module, b: nn.Module) -> None:
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(pa, pb), f"{name} differs"


def test_the_step_with_everything_off_is_plain_pytorch_bit_for_bit():
    _assert_same(_stepped(), _plain())


def test_the_parity_check_catches_a_tiny_difference():
    """The broken twin: a learning rate off in the 7th digit must not pass."""
    with pytest.raises(AssertionError, match="differs"):
        _assert_same(_stepped(), _plain(lr=0.1 * (1 + 1e-6)))


def test_a_window_steps_once_at_its_end_and_keeps_gradients_before():
    model, xs, ys = _problem()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = TrainStep(make_precision("bf16", "cpu"), Accumulator(2, unit=8), optimizer)
    results = []
    for x, y in zip(xs[:2], ys[:2]):
        with step.micro_step(model, num_samples=8):
            with step.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            step.backward(loss)
            results.append(step.step(optimizer))
            step.zero_grad(optimizer)
            if not results[-1]:
                assert all(p.grad is not None for p in model.parameters())  # mid-window: kept
    assert results == [None, True] and step.at_boundary and step.real_steps == 1
