"""Precision objects: fp16 overflow handling, loss parity with fp32, "auto" resolution.

Every parity check is compared with a loop written in plain PyTorch (no torchboost),
and each check has a broken twin that must fail it.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchboost.env
from torchboost import _fp32_precision
from torchboost.config import ConfigError
from torchboost.env import Environment
from torchboost.techniques import precision as prec
from torchboost.techniques.precision import (
    CPU_BF16_MIN_SPEEDUP,
    Fp16Precision,
    Precision,
    SlowPrecisionWarning,
    make_precision,
    resolve_precision,
)
from torchboost.techniques.precision.precision_diagnosis import PrecisionFacts, probe_precision
from torchboost.techniques.registry import ProbeContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _tf32_helpers import (HAS_NEW_API, legacy_writes, read_both_apis, script_used_the_new_api,  # noqa: E402,F401
                           torch_switches)

new_api = pytest.mark.skipif(not HAS_NEW_API, reason="this torch has no per-library fp32_precision switches")

# ----------------------------------------------------------------------------- helpers


def _env(**overrides) -> Environment:
    base = dict(
        device="cpu",
        torch_version=torch.__version__,
        cpu_cores=2,
        ram_bytes=8 << 30,
        ram_available_bytes=4 << 30,
    )
    return Environment(**{**base, **overrides})


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))


def _data(n: int = 256, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, 1, generator=g)
    # Noise keeps the loss on a plateau well above zero, so a relative tolerance means something.
    y = torch.tanh(x @ w) + 0.5 * torch.randn(n, 1, generator=g)
    return x, y


# ------------------------------------------------------------- 1. fp16 overflow on CPU

_STEPS = 8
_BAD_STEP = 3  # the loss is multiplied by inf on this step


def _optim(model: nn.Module):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return opt, sched


def _batches():
    g = torch.Generator().manual_seed(2)
    return [
        (torch.randn(32, 16, generator=g), torch.randn(32, 1, generator=g)) for _ in range(_STEPS)
    ]


def _run_with(precision: Precision):
    """The loop a Booster user writes, with one poisoned step."""
    model = _model()
    opt, sched = _optim(model)
    stepped, scales = [], []
    for i, (x, y) in enumerate(_batches()):
        with precision.autocast():
            loss = F.mse_loss(model(x).float(), y)
        if i == _BAD_STEP:
            loss = loss * float("inf")
        precision.backward(loss)
        precision.unscale_(opt)
        ok = precision.step(opt)
        if ok:  # the Booster's job: the scheduler does not advance on a skipped step
            sched.step()
        opt.zero_grad()
        stepped.append(ok)
        scales.append(precision.state_dict()["scale"])
    return model, opt, stepped, scales


def _run_control():
    """Plain PyTorch: fp16 autocast, loss scaling by hand, the poisoned step skipped by hand."""
    model = _model()
    opt, sched = _optim(model)
    scale = 2.0**16  # GradScaler's initial scale; it does not grow within 2000 steps
    for i, (x, y) in enumerate(_batches()):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x).float(), y)
        if i == _BAD_STEP:
            scale /= 2
            opt.zero_grad()
            continue
        (loss * scale).backward()
        for p in model.parameters():
            p.grad.mul_(1.0 / scale)
        opt.step()
        sched.step()
        opt.zero_grad()
    return model, opt


def _check_overflow_handled(precision: Precision) -> None:
    model, opt, stepped, scales = _run_with(precision)
    ref_model, ref_opt = _run_control()
    for p in model.parameters():
        assert torch.isfinite(p).all(), "NaN/inf reached the weights"
    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert (p - q).abs().max().item() <= 1e-7
        buf, ref_buf = opt.state[p]["momentum_buffer"], ref_opt.state[q]["momentum_buffer"]
        assert (buf - ref_buf).abs().max().item() <= 1e-7
    assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"]
    assert stepped == [i != _BAD_STEP for i in range(_STEPS)], stepped
    assert scales[_BAD_STEP] == scales[_BAD_STEP - 1] / 2


class _StepsAnyway(Fp16Precision):
    """Broken: steps the optimizer even when the gradients hold inf."""

    def step(self, optimizer):
        optimizer.step()
        self.scaler.update()
        return True


class _ReportsEveryStep(Fp16Precision):
    """Broken: skips the poisoned step but reports it as taken."""

    def step(self, optimizer):
        super().step(optimizer)
        return True


def test_fp16_overflow_skips_step_and_matches_plain_loop():
    _check_overflow_handled(make_precision("fp16", "cpu"))


@pytest.mark.parametrize("broken", [_StepsAnyway, _ReportsEveryStep])
def test_fp16_overflow_check_catches_a_precision_that_steps_anyway(broken):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inf arithmetic in the broken step
        with pytest.raises(AssertionError):
            _check_overflow_handled(broken("cpu"))


# ----------------------------------------------------------- 2. loss parity with fp32

_PARITY_STEPS = 50
_LR = 0.1


def _losses_plain_fp32(lr: float = _LR) -> list[float]:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    x, y = _data()
    losses = []
    for _ in range(_PARITY_STEPS):
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _losses_with(precision: Precision, lr: float = _LR) -> list[float]:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    x, y = _data()
    losses = []
    for _ in range(_PARITY_STEPS):
        with precision.autocast():
            loss = F.mse_loss(model(x).float(), y)
        precision.backward(loss)
        precision.step(opt)
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def _check_loss_parity(losses: list[float], reference: list[float], rel_tol: float = 0.01) -> None:
    tail, ref_tail = sum(losses[-5:]) / 5, sum(reference[-5:]) / 5
    assert abs(tail - ref_tail) <= rel_tol * abs(ref_tail), (tail, ref_tail)


@pytest.fixture(scope="module")
def fp32_losses() -> list[float]:
    return _losses_plain_fp32()


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_reduced_precision_keeps_loss_within_1pct_of_fp32(mode, fp32_losses):
    precision = make_precision(mode, "cpu")
    losses = _losses_with(precision)
    _check_loss_parity(losses, fp32_losses)
    # The run really trained (the tolerance is not met by a flat curve).
    assert losses[-1] < 0.8 * losses[0]


@pytest.mark.parametrize("mode", ["bf16", "fp16"])
def test_loss_parity_check_catches_a_wrong_learning_rate(mode, fp32_losses):
    with pytest.raises(AssertionError):
        _check_loss_parity(_losses_with(make_precision(mode, "cpu"), lr=_LR / 50), fp32_losses)


def test_loss_parity_check_catches_a_perturbed_loss(fp32_losses):
    perturbed = [loss * 1.03 for loss in _losses_with(make_precision("bf16", "cpu"))]
    with pytest.raises(AssertionError):
        _check_loss_parity(perturbed, fp32_losses)


# ------------------------------------------------------------ 3. the objects themselves


def test_fp32_is_plain_pytorch_and_touches_nothing():
    before = torch.get_float32_matmul_precision()
    p = make_precision("fp32", "cpu")
    p.setup()
    assert torch.get_float32_matmul_precision() == before
    with p.autocast():
        assert not torch.is_autocast_enabled("cpu")
    assert p.state_dict() == {}
    with pytest.raises(ValueError, match="fp16"):
        p.load_state_dict({"scale": 1.0})


@pytest.mark.parametrize("script", ["default", "new api"])
def test_tf32_allows_tf32_and_teardown_puts_both_apis_back(torch_switches, script):
    if script == "new api":
        if not HAS_NEW_API:
            pytest.skip("this torch has no per-library fp32_precision switches")
        script_used_the_new_api()  # the older flags raise when read from here on
    before = read_both_apis()
    p = make_precision("tf32", "cuda")  # building needs no GPU; only the switches change
    try:
        p.setup()
        p.setup()  # twice: teardown still gives back what the first found
        state = _fp32_precision.tf32_state()
        assert state.matmul and state.cudnn
    finally:
        p.teardown()
    if script == "new api":  # a state the older readers refused is not put back: they read the switches
        before.update({"matmul_precision": "high", "cuda.matmul.allow_tf32": True})
    assert read_both_apis() == before


@new_api
def test_tf32_tells_cublas_s_older_flag_too_which_torch_compile_reads(legacy_writes):
    p = make_precision("tf32", "cuda")
    p.setup()
    p.teardown()
    assert legacy_writes == ["torch.backends.cuda.matmul.allow_tf32 = True",
                             'torch.set_float32_matmul_precision("highest")']  # the second: teardown


@new_api
def test_the_probe_reads_tf32_a_script_set_through_the_new_api(torch_switches):
    script_used_the_new_api()
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    seen = probe_precision(ProbeContext(model=None, optimizer=None, loader=None, device="cuda"))
    assert seen == PrecisionFacts(tf32_matmul=True, tf32_cudnn=False)


@new_api
def test_twin_the_older_flags_raise_on_that_state(torch_switches):
    script_used_the_new_api()
    with pytest.raises(RuntimeError, match="legacy and new APIs"):
        torch.backends.cuda.matmul.allow_tf32


def test_bf16_autocasts_and_owns_no_scaler():
    p = make_precision("bf16", "cpu")
    with p.autocast():
        out = nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype == torch.bfloat16
    assert not hasattr(p, "scaler")
    assert p.state_dict() == {}


def test_fp16_owns_a_scaler_and_autocasts_to_half():
    p = make_precision("fp16", "cpu")
    assert isinstance(p.scaler, torch.amp.GradScaler)
    with p.autocast():
        assert nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.float16


@pytest.mark.parametrize(
    "mode, device, match",
    [("auto", "cpu", "resolve_precision"), ("tf32", "cpu", "CUDA"), ("fp8", "cpu", "fp32"),
     ("bf16", "no-such-device", "autocast")],
)
def test_make_precision_rejects_impossible_combinations(mode, device, match):
    with pytest.raises(ConfigError, match=match):
        make_precision(mode, device)


# ----------------------------------------------------------- 5. scaler state round-trip


def test_fp16_scaler_state_round_trips():
    p = make_precision("fp16", "cpu")
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for poison in (float("inf"), 1.0, 1.0):  # one backoff, then growth-tracker steps
        p.backward(model(torch.randn(3, 4)).sum() * poison)
        p.step(opt)
        opt.zero_grad()
    state = p.state_dict()
    assert state["scale"] == 2.0**15 and state["_growth_tracker"] == 2

    restored = make_precision("fp16", "cpu")
    assert restored.state_dict() != state  # a fresh scaler differs, so the check can fail
    restored.load_state_dict(state)
    assert restored.state_dict() == state
    assert restored.scaler.get_scale() == 2.0**15


# ------------------------------------------------------------ 4. resolve_precision


def test_auto_on_ampere_cuda_is_bf16():
    env = _env(device="cuda", gpu_name="A100", compute_capability=(8, 0), cuda_bf16=True)
    mode, reason = resolve_precision("auto", env)
    assert mode == "bf16" and "bf16" in reason


def test_auto_on_volta_cuda_is_fp16():
    env = _env(device="cuda", gpu_name="V100", compute_capability=(7, 0), cuda_bf16=False)
    mode, reason = resolve_precision("auto", env)
    assert mode == "fp16" and "GradScaler" in reason


def test_auto_on_pre_tensor_core_cuda_is_fp32():
    env = _env(device="cuda", gpu_name="P40", compute_capability=(6, 1), cuda_bf16=False)
    assert resolve_precision("auto", env)[0] == "fp32"


def test_auto_on_cpu_without_bf16_flags_is_fp32_without_measuring(monkeypatch):
    def _must_not_measure():
        raise AssertionError("no bf16 instructions: nothing to measure")

    monkeypatch.setattr(torchboost.env, "measure_cpu_bf16_speedup", _must_not_measure)
    mode, reason = resolve_precision("auto", _env(cpu_flags=()))
    assert mode == "fp32" and "no bf16 instructions" in reason


def test_auto_on_cpu_with_flags_but_measured_slow_is_fp32(monkeypatch):
    monkeypatch.setattr(torchboost.env, "measure_cpu_bf16_speedup", lambda: 1.05)
    mode, reason = resolve_precision("auto", _env(cpu_flags=("avx512_bf16",)))
    assert mode == "fp32"
    assert "1.05x" in reason and str(CPU_BF16_MIN_SPEEDUP) in reason


def test_auto_on_cpu_with_flags_and_measured_fast_is_bf16(monkeypatch):
    monkeypatch.setattr(torchboost.env, "measure_cpu_bf16_speedup", lambda: 1.6)
    mode, reason = resolve_precision("auto", _env(cpu_flags=("amx_bf16", "amx_tile")))
    assert mode == "bf16" and "1.60x" in reason


def test_auto_on_other_devices_is_fp32():
    assert resolve_precision("auto", _env(device="mps"))[0] == "fp32"


def test_explicit_bf16_on_flagless_cpu_runs_with_one_warning(monkeypatch):
    monkeypatch.setattr(prec, "_warned", set())
    env = _env(cpu_flags=())
    with pytest.warns(SlowPrecisionWarning) as record:
        for _ in range(3):
            mode, reason = resolve_precision("bf16", env)
    assert len(record) == 1 and "slower" in str(record[0].message)
    assert mode == "bf16" and "emulated" in reason
    with make_precision(mode, env.device).autocast():  # and it runs
        assert nn.Linear(4, 2)(torch.randn(3, 4)).dtype == torch.bfloat16


def test_explicit_modes_are_kept(monkeypatch):
    monkeypatch.setattr(prec, "_warned", set())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a CPU with bf16 instructions: no warning
        assert resolve_precision("bf16", _env(cpu_flags=("avx512_bf16",)))[0] == "bf16"
    assert resolve_precision("fp16", _env())[0] == "fp16"
    assert resolve_precision("fp32", _env(device="cuda", cuda_bf16=True))[0] == "fp32"
    ampere = _env(device="cuda", compute_capability=(8, 6), cuda_bf16=True)
    assert resolve_precision("tf32", ampere)[0] == "tf32"


@pytest.mark.parametrize(
    "requested, env, match",
    [
        ("tf32", _env(), "Ampere"),
        ("tf32", _env(device="cuda", compute_capability=(7, 5)), "Ampere"),
        ("bf16", _env(device="cuda", gpu_name="T4", compute_capability=(7, 5)), "fp16"),
        ("half", _env(), "expected one of"),
    ],
)
def test_resolve_precision_rejects_what_cannot_run(requested, env, match):
    with pytest.raises(ConfigError, match=match):
        resolve_precision(requested, env)
