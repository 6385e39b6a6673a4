"""Memory technique: channels_last changes the layout, never the result."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

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
