"""bf16 math in fp32 matmuls (``[fp32_math]``): against plain PyTorch with the same switch,
with a broken twin; its config, rule, lever, no-code hook and spelling."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import torchboost
from torchboost.frameworks import fix_torch
from torchboost.config import BoostConfig, ConfigError, Overlay
from torchboost.env import probe
from torchboost import _fp32_precision
from torchboost.evidence.observed import Facts, ProfileFacts, StepRecord
from torchboost.techniques import fp32_math as fp32_math_module
from torchboost.techniques.fp32_math import (
    Fp32MathConfig, Fp32MathFacts, apply_fp32_math, fp32_math_lower, fp32_math_tf32, measure_bf32_speedup, TECHNIQUE,
)
from torchboost.techniques.precision import PrecisionTuning
from torchboost.techniques.registry import ProbeContext, TuneContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "diagnose"))
from _diagnose_helpers import make_facts, with_  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _tf32_helpers import HAS_NEW_API, legacy_writes, read_both_apis, torch_switches  # noqa: E402,F401

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
    lever = next(lv for lv in TECHNIQUE.levers if lv.id == "fp32_math")
    with_bf16 = TuneContext(device="cpu", tuning=(PrecisionTuning(cpu_bf16=True),))
    assert lever.propose({}, with_bf16) == ([Overlay.of(Fp32MathConfig, mode="bf16")] if HAS_SWITCH else [])
    without = TuneContext(device="cpu", tuning=(PrecisionTuning(cpu_bf16=False),))
    assert lever.propose({}, without) == [] and "no bf16 instructions" in lever.hopeless(without)
    assert lever.propose({}, TuneContext(device="cuda", tuning=with_bf16.tuning)) == []  # the tf32 lever there
    assert lever.parity == "reduced"


def test_the_tf32_lever_is_tried_on_an_ampere_gpu_and_not_on_top_of_a_kept_autocast():
    lever = next(lv for lv in TECHNIQUE.levers if lv.id == "tf32")
    ampere = TuneContext(device="cuda", tuning=(PrecisionTuning(tf32=True),))
    assert lever.propose({}, ampere) == [Overlay.of(Fp32MathConfig, mode="tf32")]
    assert lever.propose({"precision.mode": "bf16"}, ampere) == []
    assert lever.propose({}, TuneContext(device="cuda", tuning=(PrecisionTuning(tf32=False),))) == []
    assert lever.propose({}, TuneContext(device="cpu", tuning=ampere.tuning)) == []
    assert (lever.parity, lever.finding_ids, lever.probed_by) == ("reduced", ("fp32_math.tf32",), "fp32_math.tf32")


# -- TF32 on CUDA: the same idea through cuBLAS's and cuDNN's switches ------------------------

def _fp32_cuda_facts(*, tf32_matmul=False, tf32_cudnn=True, ratio=8.0, mm_ms=60.0, conv_ms=0.0,
                     autocast=None, tf32_gpu=True) -> Facts:
    """A CUDA step, forward and backward 80% of it, the profiled GPU time mm_ms in matmuls,
    conv_ms in convolutions and 20 ms elsewhere."""
    facts = make_facts("cuda", forward=40.0, backward=40.0)
    facts.env["tf32"] = tf32_gpu
    facts = with_(facts, precision={"autocast": autocast is not None, "autocast_dtype": autocast,
                                    "tf32_matmul": tf32_matmul, "tf32_cudnn": tf32_cudnn})
    ops = [{"name": "aten::mm", "self_cpu_ms": 1.0, "self_device_ms": mm_ms, "calls": 6},
           {"name": "aten::convolution_backward", "self_cpu_ms": 1.0, "self_device_ms": conv_ms, "calls": 2},
           {"name": "aten::add_", "self_cpu_ms": 1.0, "self_device_ms": 20.0, "calls": 9}]
    facts.profile = ProfileFacts(steps=1, top_ops=ops)
    facts.techniques["fp32_math"] = Fp32MathFacts(tf32_peak_ratio=ratio)
    return facts


def test_the_tf32_rule_fires_on_fp32_matmuls_without_tf32_with_amdahl_on_the_measured_peak_ratio():
    finding = fp32_math_tf32(_fp32_cuda_facts())
    assert finding is not None and finding.fix == Overlay.of(Fp32MathConfig, mode="tf32") and finding.dtype == "tf32"
    # f = 0.8 of the step in forward+backward, m = 60/80 of the GPU op time, s = 8 measured
    assert finding.expected_speedup == pytest.approx(1 / (1 - 0.8 * 0.75 + 0.8 * 0.75 / 8.0))
    assert "m = 0.75" in finding.formula and "s = 8.00: the TF32/fp32 matmul peak ratio" in finding.formula
    assert finding.evidence["tf32_peak_ratio"] == 8.0
    assert "torch.backends.cuda.matmul.allow_tf32 = True" in fix_torch(finding)  # the flag torch.compile reads


def test_without_a_measured_peak_ratio_the_gain_is_assumed_and_says_so():
    finding = fp32_math_tf32(_fp32_cuda_facts(ratio=None))
    assert finding.expected_speedup == pytest.approx(1 / (1 - 0.6 + 0.6 / 2.0)) and "assumed" in finding.formula


def test_convolutions_count_where_cudnn_s_tf32_is_off_too():
    on = fp32_math_tf32(_fp32_cuda_facts(mm_ms=10.0, conv_ms=50.0))
    off = fp32_math_tf32(_fp32_cuda_facts(mm_ms=10.0, conv_ms=50.0, tf32_cudnn=False))
    assert on.evidence["tf32_ops_pct"] == pytest.approx(12.5) and off.evidence["tf32_ops_pct"] == pytest.approx(75.0)
    assert "matmuls and convolutions" in off.title


@pytest.mark.parametrize("kw", [dict(tf32_matmul=True), dict(autocast="bfloat16"), dict(tf32_gpu=False),
                                dict(mm_ms=1.0)])
def test_twin_no_tf32_finding_once_on_under_autocast_before_ampere_or_without_matmul_time(kw):
    assert fp32_math_tf32(_fp32_cuda_facts(**kw)) is None


def test_twin_no_tf32_finding_on_a_cpu_run():
    facts = _fp32_cuda_facts()
    facts.env["device"], facts.model.device = "cpu", "cpu"
    assert fp32_math_tf32(facts) is None
    assert fp32_math_tf32(_fp32_cpu_facts(2.0)) is None


@pytest.fixture
def ampere(monkeypatch, torch_switches):
    """A process that takes itself for one on an Ampere GPU: the switches work without one."""
    env = probe()
    monkeypatch.setattr(fp32_math_module, "probe_env", lambda: dataclasses.replace(
        env, device="cuda", compute_capability=(8, 0)))


def _cuda_ctx() -> ProbeContext:
    return ProbeContext(model=None, optimizer=None, loader=None, device="cuda")


@pytest.mark.skipif(not HAS_NEW_API, reason="this torch has no per-library fp32_precision switches")
def test_the_tf32_switch_at_torch_s_defaults_turns_tf32_on_and_puts_both_apis_back(ampere, legacy_writes):
    before = read_both_apis()
    switch = fp32_math_module.quick_switch(_cuda_ctx())  # cuDNN's conv switch reads "tf32" by default
    assert switch is not None and switch.finding_id == "fp32_math.tf32"
    assert dict(switch.setting) == {"fp32_math.mode": "tf32"}
    switch.on()
    assert _fp32_precision.tf32_state().matmul
    switch.off()
    assert read_both_apis() == before and legacy_writes[0] == "torch.backends.cuda.matmul.allow_tf32 = True"


def test_twin_no_tf32_switch_when_the_script_allowed_it_or_before_ampere(ampere, monkeypatch):
    _fp32_precision.set_tf32(True, cudnn=False)
    assert fp32_math_module.quick_switch(_cuda_ctx()) is None
    _fp32_precision.set_tf32(False, cudnn=False)
    assert fp32_math_module.quick_switch(_cuda_ctx()) is not None
    monkeypatch.setattr(fp32_math_module, "probe_env", lambda: dataclasses.replace(
        probe(), device="cuda", compute_capability=(7, 5)))
    assert fp32_math_module.quick_switch(_cuda_ctx()) is None


def test_tf32_mode_applies_to_every_cuda_switch_and_is_spelled_with_them(torch_switches):
    assert apply_fp32_math("tf32", "cuda").startswith("fp32 matmuls and convolutions on cuda compute in tf32")
    assert _fp32_precision.tf32_state() == _fp32_precision.Tf32State(True, True, _fp32_precision.tf32_state().api)
    lines = TECHNIQUE.spell(Fp32MathConfig(mode="tf32")).unflagged
    assert lines == _fp32_precision.spelling(dict.fromkeys(_fp32_precision.CUDA_SWITCHES, "tf32"))


@pytest.mark.gpu
def test_gpu_the_tf32_switch_on_a_tiny_cuda_model_then_off_puts_the_flags_back(torch_switches):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
    x, y = torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
    _fp32_precision.set_tf32(False, cudnn=False)  # the script's own: fp32 matmuls without TF32
    before = read_both_apis()
    switch = fp32_math_module.quick_switch(ProbeContext(model=model, optimizer=None, loader=None, device="cuda"))
    if switch is None:
        pytest.skip("this GPU has no TF32 (before Ampere)")
    switch.on()
    assert _fp32_precision.tf32_state().matmul
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    switch.off()
    assert torch.isfinite(loss).item() and read_both_apis() == before
