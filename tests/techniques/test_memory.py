"""Memory technique: channels_last changes the layout, never the result."""

from __future__ import annotations

import copy
import json
import runpy
import sys

import pytest
import torch
from torch import nn

from torchboost import cli, handover
from torchboost.config import BoostConfig
from torchboost.nocode import Applier
from torchboost.plan import Plan
from torchboost.techniques.memory import (
    apply_channels_last,
    has_conv2d,
    resolve_channels_last,
    to_channels_last,
)

CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # a descriptor only


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    ).eval()


def convs(model: nn.Module) -> list[nn.Conv2d]:
    return [m for m in model.modules() if isinstance(m, nn.Conv2d)]


def assert_same_output(reference: nn.Module, candidate: nn.Module, x: torch.Tensor) -> None:
    """The candidate, fed channels_last input, computes what the plain NCHW reference does."""
    with torch.no_grad():
        expected = reference(x)
        got = candidate(to_channels_last(x))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def _broken_channels_last(model: nn.Module) -> nn.Module:
    # Reinterprets the NCHW data as NHWC without reordering it: the layout bug a hand
    # conversion makes. The weights change meaning, so the output must change.
    with torch.no_grad():
        for conv in convs(model):
            w = conv.weight
            conv.weight.copy_(w.contiguous().view(w.shape[0], w.shape[2], w.shape[3], w.shape[1]).permute(0, 3, 1, 2))
    return model


def test_channels_last_model_computes_the_same_and_converts_conv_weights():
    model = small_cnn()
    reference = copy.deepcopy(model)
    x = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    result = apply_channels_last(model)
    assert result is model  # in place
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs(model))
    assert not all(c.weight.is_contiguous() for c in convs(model))
    assert_same_output(reference, model, x)


def test_check_catches_a_wrong_layout_conversion():
    reference = small_cnn()
    x = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    broken = _broken_channels_last(apply_channels_last(copy.deepcopy(reference)))
    with pytest.raises(AssertionError):
        assert_same_output(reference, broken, x)


def test_to_channels_last_touches_only_4d_float_tensors():
    image = torch.randn(2, 3, 4, 5)
    mask = torch.ones(2, 1, 4, 5, dtype=torch.long)
    seq = torch.randn(2, 3, 4)
    out = to_channels_last({"image": image, "mask": mask, "rest": [seq, "name"]})
    assert out["image"].is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out["image"], image)
    assert out["mask"] is mask and out["rest"][0] is seq and out["rest"][1] == "name"


def test_auto_is_off_on_cpu_with_a_reason():
    on, reason = resolve_channels_last("auto", small_cnn(), device=CPU, precision_mode="bf16")
    assert on is False and "cpu" in reason


@pytest.mark.parametrize(
    "requested, device, precision, model, expected",
    [
        ("auto", CUDA, "bf16", "cnn", True),
        ("auto", CUDA, "fp16", "cnn", True),
        ("auto", CUDA, "fp32", "cnn", False),
        ("auto", CUDA, "tf32", "cnn", False),
        ("auto", CUDA, "bf16", "mlp", False),
        (True, CPU, "fp32", "cnn", True),  # explicit true is honoured on CPU
        (True, CPU, "fp32", "mlp", True),
        (False, CUDA, "bf16", "cnn", False),
    ],
)
def test_resolve_channels_last(requested, device, precision, model, expected):
    module = small_cnn() if model == "cnn" else nn.Sequential(nn.Linear(3, 3))
    on, reason = resolve_channels_last(requested, module, device=device, precision_mode=precision)
    assert on is expected, reason
    assert reason


def test_has_conv2d():
    assert has_conv2d(small_cnn())
    assert has_conv2d(nn.Sequential(nn.ConvTranspose2d(2, 2, 3)))
    assert not has_conv2d(nn.Sequential(nn.Conv1d(2, 2, 3), nn.Linear(2, 2)))


# -- from outside: torchboost run and tune's trials -------------------------------------------


def _nocode_channels_last(model: nn.Module, x: torch.Tensor) -> list[str]:
    """``model`` run twice under the no-code applier asking for channels_last; its notes."""
    applier = Applier(Plan.applying({"memory.channels_last": True})).install()
    try:
        for _ in range(2):  # converted after the root's first forward, as in a script's loop
            model(x)
    finally:
        applier.uninstall()
    return applier.notes


def assert_same_training_maths(reference: nn.Module, candidate: nn.Module, x: torch.Tensor) -> None:
    """Fed the same NCHW batch, the candidate computes the reference's outputs and gradients."""
    outputs = []
    for model in (reference, candidate):
        model.zero_grad(set_to_none=True)
        out = model(x)
        out.square().mean().backward()
        outputs.append((out.detach(), [p.grad for p in model.parameters()]))
    (want, want_grads), (got, got_grads) = outputs
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-5)


def test_the_no_code_applier_converts_the_conv_weights_and_computes_the_same():
    model, x = small_cnn(), torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    reference = copy.deepcopy(model)
    weights = [c.weight for c in convs(model)]
    notes = _nocode_channels_last(model, x)
    assert notes == ["channels_last on Sequential's weights (its first convolution converts the NCHW inputs)"]
    assert [c.weight for c in convs(model)] == weights  # the same parameters: an optimizer still holds them
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs(model))
    assert not all(c.weight.is_contiguous() for c in convs(model))
    assert convs(model)[0](x).is_contiguous(memory_format=torch.channels_last)  # NCHW in, channels_last out
    assert_same_training_maths(reference, model, x)


def test_the_twin_a_wrong_layout_transform_fails_the_same_check():
    model, x = small_cnn(), torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    reference = copy.deepcopy(model)
    _nocode_channels_last(model, x)
    with pytest.raises(AssertionError):
        assert_same_training_maths(reference, _broken_channels_last(model), x)


def test_tune_tries_it_on_an_unmodified_script_with_convolutions():
    from torchboost.techniques.memory import TECHNIQUE, MemoryTuning
    from torchboost.techniques.registry import TuneContext

    lever = TECHNIQUE.levers[0]
    assert lever.propose({}, TuneContext(device="cpu", uses_booster=False, tuning=(MemoryTuning(has_conv2d=True),))) == [
        {"memory.channels_last": True}]
    assert lever.propose({}, TuneContext(device="cuda", tuning=(MemoryTuning(has_conv2d=False),))) == []


CONV_SCRIPT = """
import json, sys
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.Flatten(), nn.Linear(144, 2))
x, y = torch.randn(4, 3, 8, 8), torch.randn(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for _ in range(3):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    losses.append(loss.item())
layout = [m.weight.is_contiguous(memory_format=torch.channels_last) and not m.weight.is_contiguous()
          for m in model if isinstance(m, nn.Conv2d)]
json.dump({"losses": losses, "channels_last": layout}, open(sys.argv[1], "w"))
"""


@pytest.mark.slow
def test_torchboost_run_applies_channels_last_to_the_script_s_model(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script runs here: run sets sys.path[0]
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    # A fresh process's claims: a Booster an earlier test prepared in this process claimed its techniques.
    monkeypatch.setattr(handover, "_PROCESS_CLAIMS", handover.Claims())
    (tmp_path / "train.py").write_text(CONV_SCRIPT)
    BoostConfig.off().replace(memory={"channels_last": True}).to_toml(tmp_path / "torchboost.toml")
    assert cli.main(["run", "--", "python", "train.py", "run.json"]) == 0
    applied = next(line for line in capfd.readouterr().err.splitlines() if line.startswith("torchboost run: applied"))
    assert "channels_last on Sequential's weights" in applied
    monkeypatch.setattr(sys, "argv", ["train.py", "plain.json"])
    runpy.run_path("train.py", run_name="__main__")  # the twin: the same script, plain PyTorch
    run, plain = (json.loads((tmp_path / name).read_text()) for name in ("run.json", "plain.json"))
    assert run["channels_last"] == [True, True] and plain["channels_last"] == [False, False]
    assert run["losses"] == pytest.approx(plain["losses"], rel=1e-5, abs=1e-6)


@pytest.mark.gpu
def test_on_cuda_the_no_code_applier_s_model_takes_nchw_batches_and_computes_the_same():
    model = small_cnn().train().cuda()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 3, 16, 16, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    _nocode_channels_last(model, x)
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs(model))
    assert convs(model)[0](x).is_contiguous(memory_format=torch.channels_last)  # cuDNN follows the weight
    outs = []
    for m in (reference, model):
        out = m(x)
        out.square().mean().backward()
        outs.append((out.detach(), [p.grad for p in m.parameters()]))
    # TF32 convolutions (PyTorch's default for cuDNN) in two layouts agree to about 1e-3.
    (want, want_grads), (got, got_grads) = outs
    torch.testing.assert_close(got, want, rtol=5e-3, atol=5e-3)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=5e-3, atol=5e-3)
