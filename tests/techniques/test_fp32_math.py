"""bf16 math in fp32 matmuls (``[fp32_math]``): against plain PyTorch with the same switch,
with a broken twin; its config, rule, lever, no-code hook and spelling."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import torchboost
from torchboost.frameworks import fix_torch
from torchboost.config import BoostConfig, ConfigError, Overlay
from torchboost.env import probe
from torchboost.evidence.observed import Facts, StepRecord
from torchboost.techniques.fp32_math import (
    Fp32MathConfig, Fp32MathFacts, apply_fp32_math, fp32_math_lower, measure_bf32_speedup, TECHNIQUE,
)
from torchboost.techniques.registry import TuneContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnose"))
from _diagnose_helpers import make_facts, with_  # noqa: E402

HAS_SWITCH = hasattr(torch.backends.mkldnn, "matmul") and hasattr(torch.backends.mkldnn.matmul, "fp32_precision")
BF16_CPU = HAS_SWITCH and probe().cpu_bf16
STEPS = 12


@pytest.fixture(autouse=True)
def _restore_switch():
    """Each test leaves torch's fp32 arithmetic as it found it."""
    before = [b.fp32_precision for b in (torch.backends.mkldnn.matmul, torch.backends.mkldnn.conv)] if HAS_SWITCH else []
    yield
    if HAS_SWITCH:
        torch.backends.mkldnn.matmul.fp32_precision, torch.backends.mkldnn.conv.fp32_precision = before


def _setup():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(STEPS)]
    return model, optimizer, data


def _plain(math_mode: str) -> list[torch.Tensor]:
    """The reference, written without torchboost: the switch set by hand, then the loop."""
    torch.backends.mkldnn.matmul.fp32_precision = math_mode
    torch.backends.mkldnn.conv.fp32_precision = math_mode
    model, optimizer, data = _setup()
    for x, y in data:
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.backends.mkldnn.matmul.fp32_precision = torch.backends.mkldnn.conv.fp32_precision = "none"
    return [p.detach().clone() for p in model.parameters()]


def _boosted() -> list[torch.Tensor]:
    model, optimizer, data = _setup()
    config = Overlay.of(Fp32MathConfig, mode="bf16").on(BoostConfig.off())
    booster = torchboost.Booster(config, device="cpu", verbose=False)
    model, optimizer = booster.prepare(model, optimizer)
    for x, y in data:
        with booster.autocast():
            loss = nn.functional.cross_entropy(model(x), y)
        booster.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    torch.backends.mkldnn.matmul.fp32_precision = torch.backends.mkldnn.conv.fp32_precision = "none"
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.skipif(not BF16_CPU, reason="needs a CPU with AMX or avx512_bf16 and torch's fp32_precision switch")
def test_the_booster_trains_as_plain_pytorch_with_the_same_switch():
    assert all(torch.equal(a, b) for a, b in zip(_boosted(), _plain("bf16")))


@pytest.mark.skipif(not BF16_CPU, reason="needs a CPU with AMX or avx512_bf16 and torch's fp32_precision switch")
def test_twin_plain_fp32_arithmetic_trains_other_weights():
    assert not all(torch.equal(a, b) for a, b in zip(_boosted(), _plain("none")))


def test_off_and_auto_leave_torchs_arithmetic_alone():
    if not HAS_SWITCH:
        pytest.skip("this torch has no fp32_precision switch")
    torch.backends.mkldnn.matmul.fp32_precision = "none"
    for config in (BoostConfig.off(), BoostConfig()):
        model, optimizer, _ = _setup()
        torchboost.Booster(config, device="cpu", verbose=False).prepare(model, optimizer)
        assert torch.backends.mkldnn.matmul.fp32_precision == "none"


def test_a_bad_mode_names_the_field():
    with pytest.raises(ConfigError, match="fp32_math.mode"):
        Fp32MathConfig(mode="bf17")


def test_apply_sets_and_says_and_keep_does_nothing():
    if not HAS_SWITCH:
        pytest.skip("this torch has no fp32_precision switch")
    assert apply_fp32_math("keep", "cpu") is None and torch.backends.mkldnn.matmul.fp32_precision == "none"
    assert "compute in bf16" in apply_fp32_math("bf16", "cpu")
    assert torch.backends.mkldnn.matmul.fp32_precision == "bf16" == torch.backends.mkldnn.conv.fp32_precision
    apply_fp32_math("ieee", "cpu")
    assert torch.backends.mkldnn.matmul.fp32_precision == "none"


def test_the_no_code_hook_applies_it_from_outside():
    if not HAS_SWITCH:
        pytest.skip("this torch has no fp32_precision switch")
    notes: list[str] = []
    TECHNIQUE.nocode.at_start({"mode": "bf16"}, notes)
    assert torch.backends.mkldnn.matmul.fp32_precision == "bf16" and notes == [
        "fp32 matmuls and convolutions on cpu compute in bf16"]


def test_the_measurement_restores_the_switch():
    if not HAS_SWITCH:
        pytest.skip("this torch has no fp32_precision switch")
    torch.backends.mkldnn.matmul.fp32_precision = "none"
    speedup = measure_bf32_speedup(size=128, repeats=3)
    assert speedup is not None and speedup > 0 and torch.backends.mkldnn.matmul.fp32_precision == "none"


def _fp32_cpu_facts(measured: float | None, precision: str = "none") -> Facts:
    facts = make_facts("cpu", forward=40.0, backward=40.0)
    facts = with_(facts, precision={"autocast": False, "autocast_dtype": None})
    facts.techniques["fp32_math"] = Fp32MathFacts(cpu_precision=precision, bf32_speedup=measured)
    return facts


def test_the_rule_fires_on_fp32_compute_with_a_measured_gain_and_moves_the_step_to_bf16():
    finding = fp32_math_lower(_fp32_cpu_facts(2.0))
    assert finding is not None and finding.dtype == "bf16" and finding.fix == Overlay.of(Fp32MathConfig, mode="bf16")
    assert finding.expected_speedup == pytest.approx(1 / (0.2 + 0.8 / 2.0))  # 80% of the step twice as fast
    assert 'torch.backends.mkldnn.matmul.fp32_precision = "bf16"' in fix_torch(finding)


@pytest.mark.parametrize("measured, precision", [(1.02, "none"), (None, "none"), (2.0, "bf16")])
def test_twin_no_finding_without_a_gain_a_measurement_or_when_it_is_on(measured, precision):
    assert fp32_math_lower(_fp32_cpu_facts(measured, precision)) is None


def test_the_lever_is_tried_on_a_bf16_cpu_and_said_hopeless_without_one():
    lever, = TECHNIQUE.levers
    with_bf16 = TuneContext(device="cpu", cpu_bf16=True)
    assert lever.propose({}, with_bf16) == ([Overlay.of(Fp32MathConfig, mode="bf16")] if HAS_SWITCH else [])
    without = TuneContext(device="cpu", cpu_bf16=False)
    assert lever.propose({}, without) == [] and "no bf16 instructions" in lever.hopeless(without)
    assert lever.propose({}, TuneContext(device="cuda", cpu_bf16=True)) == []  # precision's tf32 lever there
    assert lever.parity == "reduced"
