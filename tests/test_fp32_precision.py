"""The one place torch's TF32 and fp32-math switches are read and written: whatever API a
script used, reading never raises, a write goes through the per-library switches alone, and
a restore puts back exactly what was there. Without a GPU the switches are still readable
and settable; the gpu-marked test runs the same on a real CUDA matmul."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

from torchboost import _fp32_precision as switches

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tf32_helpers import (HAS_NEW_API, OlderTorch, legacy_writes, read_both_apis,  # noqa: E402,F401
                           script_used_the_new_api, torch_switches)

new_api = pytest.mark.skipif(not HAS_NEW_API, reason="this torch has no per-library fp32_precision switches")


@new_api
def test_a_script_state_set_through_the_new_api_is_read_without_raising(torch_switches):
    script_used_the_new_api()
    state = switches.tf32_state()
    assert (state.matmul, state.cudnn, state.api) == (True, True, "fp32_precision")


@new_api
def test_twin_the_older_flags_raise_on_that_state(torch_switches):
    script_used_the_new_api()
    with pytest.raises(RuntimeError, match="legacy and new APIs"):
        torch.backends.cuda.matmul.allow_tf32
    with pytest.raises(RuntimeError, match="legacy and new APIs"):
        torch.get_float32_matmul_precision()


@new_api
@pytest.mark.parametrize("script", ["default", "new api", "cudnn apart"])
def test_tf32_on_then_restored_leaves_both_apis_as_they_were(torch_switches, script):
    if script == "new api":
        script_used_the_new_api()
    elif script == "cudnn apart":  # conv and RNN set apart: torch's older cuDNN flag raises
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    before = read_both_apis()
    saved = switches.set_tf32(True)
    assert switches.read_switches(switches.CUDA_SWITCHES) == dict.fromkeys(switches.CUDA_SWITCHES, "tf32")
    assert not switches.older_readers_refuse()  # what torch.compile reads for a GPU
    saved.restore()
    if script == "new api":  # a state the older readers refused is not put back: they read the switches
        before.update({"matmul_precision": "high", "cuda.matmul.allow_tf32": True})
    assert read_both_apis() == before


@new_api
def test_twin_a_restore_that_forgets_a_switch_leaves_it_changed(torch_switches):
    before = read_both_apis()
    saved = switches.set_tf32(False)
    switches.Saved(saved.switches[1:]).restore()  # the matmul switch left out
    assert read_both_apis() != before


@new_api
def test_no_write_of_the_older_flags_where_the_new_switches_alone_agree_with_them(legacy_writes):
    switches.set_tf32(False).restore()
    switches.set_switches({"cuda.matmul": "ieee", "mkldnn.matmul": "none"}).restore()
    assert legacy_writes == []


@new_api
def test_tf32_on_is_told_to_the_older_flags_torch_compile_reads(legacy_writes):
    switches.set_tf32(True).restore()
    assert legacy_writes[0] == "torch.backends.cuda.matmul.allow_tf32 = True"
    assert not any("cudnn" in write for write in legacy_writes)  # cuDNN's switches set together: no need


def _reads_what_inductor_reads(gm, example_inputs):
    """A compiler backend that reads cuBLAS's TF32 state as Inductor does for a GPU (its
    autotune cache keys on the matmul precision, its kernel choice reads allow_tf32)."""
    torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32
    return gm.forward


def _compiled_after(tf32_on) -> object:
    from torchboost.techniques.compile.safe_compile import apply_compile

    torch._dynamo.reset()  # a frame compiled by an earlier test would not reach the backend again
    tf32_on()
    model = torch.nn.Linear(4, 4)
    stats = apply_compile(model, mode="default", scope="model", _backend=_reads_what_inductor_reads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fall-back's warning: the stats say it
        model(torch.ones(2, 4))
    return stats


@new_api
def test_tf32_on_through_the_precision_lever_then_compile_does_not_fall_back(torch_switches):
    from torchboost.techniques.precision.precision_policy import Tf32Precision

    precision = Tf32Precision("cuda")
    stats = _compiled_after(precision.setup)
    assert switches.tf32_state().matmul and not stats.fell_back and stats.error is None
    precision.teardown()


@new_api
def test_twin_tf32_on_through_the_matmul_switch_alone_then_compile_falls_back(torch_switches):
    stats = _compiled_after(script_used_the_new_api)
    assert stats.fell_back and "legacy and new APIs" in str(stats.error)


def test_twin_the_spy_sees_a_write_of_the_older_flags(legacy_writes):
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = False
    assert legacy_writes == ['torch.set_float32_matmul_precision("highest")', "torch.backends.cudnn.allow_tf32 = True",
                             "torch.backends.cuda.matmul.allow_tf32 = False"]


@pytest.fixture
def older_torch(monkeypatch) -> OlderTorch:
    """A torch before 2.9: its TF32 flags, no per-library switch at all."""
    return OlderTorch(monkeypatch)


def test_an_older_torch_is_read_and_set_through_its_flags_and_restored_exactly(older_torch):
    older_torch.precision, older_torch.cudnn.allow_tf32 = "medium", False  # what allow_tf32 cannot give back
    state = switches.tf32_state()
    assert (state.matmul, state.cudnn, state.api) == (True, False, "allow_tf32")
    saved = switches.set_tf32(False)
    assert (older_torch.precision, older_torch.cudnn.allow_tf32) == ("highest", False)
    switches.set_tf32(True)
    assert (older_torch.precision, older_torch.cudnn.allow_tf32) == ("high", True)
    saved.restore()
    assert (older_torch.precision, older_torch.cudnn.allow_tf32) == ("medium", False)


def test_an_older_torch_has_no_cpu_switch_to_set(older_torch):
    assert switches.set_switches({"mkldnn.matmul": "bf16"}) == switches.Saved()
    assert not switches.has_switch("cuda.matmul") and not switches.has_switch("mkldnn.matmul")


@new_api
def test_the_spelling_follows_the_api_this_torch_has(monkeypatch):
    assert switches.spelling({"cuda.matmul": "tf32", "cudnn.conv": "tf32"}) == (
        "torch.backends.cuda.matmul.allow_tf32 = True", 'torch.backends.cudnn.conv.fp32_precision = "tf32"')
    assert switches.spelling({"cuda.matmul": "ieee"}) == ('torch.backends.cuda.matmul.fp32_precision = "ieee"',)
    OlderTorch(monkeypatch)
    assert switches.spelling({"cuda.matmul": "tf32", "cudnn.conv": "tf32", "cudnn.rnn": "tf32"}) == (
        "torch.backends.cuda.matmul.allow_tf32 = True", "torch.backends.cudnn.allow_tf32 = True")


@pytest.mark.gpu
def test_gpu_tf32_on_a_real_cuda_matmul_and_the_switches_put_back(torch_switches):
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(512, 512, device="cuda", generator=g) for _ in range(2))
    before = read_both_apis()
    saved = switches.set_tf32(False)
    ieee = a @ b
    switches.set_tf32(True)
    tf32 = a @ b
    saved.restore()
    assert read_both_apis() == before
    assert switches.tf32_state().api == ("fp32_precision" if HAS_NEW_API else "allow_tf32")
    exact = (a.double() @ b.double()).float()
    assert (ieee - exact).abs().max() < (tf32 - exact).abs().max()  # TF32 rounded the inputs: a larger error
