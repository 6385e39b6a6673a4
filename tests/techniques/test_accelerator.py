"""The accelerator left unused: a CUDA GPU or MPS here (faked), the model on the CPU."""

from __future__ import annotations

import pytest
import torch

from torchboost import env
from torchboost.diagnose import diagnose
from torchboost.evidence.observed import Facts, ModelFacts, StepRecord
from torchboost.techniques.accelerator import accelerator_unused


def _facts(here: str, model_on: str) -> Facts:
    steps = [StepRecord(i, 50.0, forward_ms=20.0, backward_ms=20.0, optimizer_ms=5.0) for i in range(3, 13)]
    return Facts(env={"device": here, "gpu_name": "NVIDIA H100 80GB HBM3" if here == "cuda" else ""},
                 model=ModelFacts(class_name="Net", parameters=1000, device=model_on), steps=steps, warmup_steps=3)


@pytest.mark.parametrize("here", ["cuda", "mps"])
def test_an_accelerator_here_and_the_model_on_the_cpu_is_named_with_the_move(here):
    finding = accelerator_unused(_facts(here, "cpu"))
    assert finding is not None and f"move the model and batches to '{here}'" in finding.title
    assert f"model.to('{here}')" in finding.advice and "model = model.to(device)" in finding.advice_code
    assert finding.expected_speedup == 1.0 and "not measured" in finding.formula  # no gain claimed
    assert "accelerator.unused" in [f.id for f in diagnose(_facts(here, "cpu"))]


def test_on_a_mac_the_fix_tests_for_mps_beside_cuda():
    finding = accelerator_unused(_facts("mps", "cpu"))
    assert "torch.backends.mps.is_available()" in finding.advice_code
    assert "torch.cuda.is_available()" in finding.advice  # what the script tested alone


@pytest.mark.parametrize("here, model_on", [("cuda", "cuda:0"), ("mps", "mps:0"), ("cpu", "cpu")])
def test_twin_silent_with_the_model_on_the_device_or_no_accelerator(here, model_on):
    assert accelerator_unused(_facts(here, model_on)) is None
    assert "accelerator.unused" not in [f.id for f in diagnose(_facts(here, model_on))]


def test_a_fake_mps_is_the_environment_s_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert env._device() == "mps"
