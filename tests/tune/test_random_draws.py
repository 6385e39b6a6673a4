"""A change that draws the step's random numbers itself (compile's dropout) is judged on the
losses' trend where the step draws any; everywhere else it is held step by step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchboost.observe.probes.flop_count import StepFlops
from torchboost.techniques.registry import Lever, Parity, techniques
from torchboost.tune.search.parity import check_parity, judge

COMPILE = next(lever for t in techniques() for lever in t.levers if lever.id == "compile")
FUSED = Lever("optimizer", "fused optimizer", Parity.EXACT, lambda incumbent, ctx: [])
DROPOUT_OPS = ("aten.bernoulli_",)


def _model(p: float) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(p), nn.Linear(64, 4))


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    x = torch.randn(64, 16)
    return x, x[:, :4].sum(1, keepdim=True).repeat(1, 4)


def _losses(model: nn.Module, forward, steps: int, *, broken: bool = False) -> list[float]:
    """Plain PyTorch training, the same seed for every run; ``broken`` drops every gradient."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _data()
    torch.manual_seed(2)
    losses = []
    for _ in range(steps):
        loss = nn.functional.mse_loss(forward(x), y)
        opt.zero_grad()
        loss.backward()
        if broken:
            for p in model.parameters():
                p.grad.zero_()
        opt.step()
        losses.append(loss.item())
    return losses


def _counted_step(model: nn.Module) -> StepFlops:
    x, y = _data()
    counter = StepFlops()
    counter.start()
    nn.functional.mse_loss(model(x), y).backward()
    counter.stop()
    return counter


def test_the_counted_step_names_dropouts_random_op():
    assert _counted_step(_model(0.3)).random_ops == list(DROPOUT_OPS)


def test_twin_a_model_in_eval_mode_draws_nothing():
    assert _counted_step(_model(0.3).eval()).random_ops == []


def _trend(offset: float, steps: int = 20, climb: float = 0.0) -> list[float]:
    return [2.0 * 0.9 ** i + 0.5 + offset * (-1) ** i + climb * i for i in range(steps)]


def test_compile_on_a_step_with_dropout_is_judged_on_the_trend():
    baseline, compiled = _trend(0.0), _trend(0.01)  # other masks: 0.5% apart step by step
    verdict = judge(COMPILE, compiled, baseline, baseline, random_ops=DROPOUT_OPS)
    assert verdict.ok and verdict.kind == "statistical", verdict.detail
    assert "draws random numbers (aten.bernoulli_)" in verdict.detail and "limit 1e-03" in verdict.detail


def test_twin_the_same_losses_without_random_ops_are_incorrect():
    baseline, compiled = _trend(0.0), _trend(0.01)
    assert not judge(COMPILE, compiled, baseline, baseline).ok


def test_twin_a_lever_that_draws_nothing_itself_is_held_step_by_step():
    baseline, fused = _trend(0.0), _trend(0.01)
    verdict = judge(FUSED, fused, baseline, baseline, random_ops=DROPOUT_OPS)
    assert not verdict.ok and "first 3 losses" in verdict.detail


def test_a_compiled_step_that_diverges_is_still_incorrect():
    baseline, broken = _trend(0.0), _trend(0.01, climb=0.05)
    verdict = judge(COMPILE, broken, baseline, baseline, random_ops=DROPOUT_OPS)
    assert not verdict.ok and "diverged" in verdict.detail


@pytest.mark.slow
def test_torch_compile_with_dropout_against_plain_pytorch(tmp_path, monkeypatch):
    """The real thing: the same seed, eager against compiled. Compiled dropout keeps other
    units, so step by step they part; on the trend they agree; a compiled run whose
    gradients are dropped (a broken twin) fails."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    steps = 20
    model = _model(0.3)
    eager = _losses(model, model, steps)
    random_ops = _counted_step(_model(0.3)).random_ops
    model = _model(0.3)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    forward = torch.compile(model)
    compiled = _losses(model, forward, steps)
    model.load_state_dict(start)  # the same module again: no second compile
    broken = _losses(model, forward, steps, broken=True)
    torch._dynamo.reset()
    assert not check_parity(eager, compiled, kind="exact").ok  # other masks from the same seed
    verdict = judge(COMPILE, compiled, eager, eager, random_ops=random_ops)
    assert verdict.ok, verdict.detail
    assert not judge(COMPILE, broken, eager, eager, random_ops=random_ops).ok
