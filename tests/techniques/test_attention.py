"""Attention written by hand: the finding fires on its op pattern, and only there.

On made-up op tables (a CUDA run with the pattern, a CPU run without it, runs that already
call scaled_dot_product_attention), then on op tables a real profiler window recorded, as
the doctor's does, of a tiny attention model written by hand and its twin calling SDPA.
"""

from __future__ import annotations

import dataclasses
import math
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from torchboost.diagnose import RULES, diagnose
from torchboost.evidence.observed import Facts, ModelFacts, ProfileFacts, StepRecord
from torchboost.frameworks import fix_toml, fix_torch
from torchboost.observe.probes.profile import ProfileWindow
from torchboost.techniques.attention import TECHNIQUE, _example, attention_hand_written, attention_ops

ID = "attention.hand_written"


def _with_ops(facts: Facts, extra=(), drop=(), device: str | None = None, **changes) -> Facts:
    """``facts`` with ops ``(name, calls, ms)`` added to its op table, ``drop`` names removed."""
    device = device or facts.env["device"]
    key = "self_device_ms" if device == "cuda" else "self_cpu_ms"
    rows = [dict(op, **({key: op["self_device_ms"]} if key == "self_cpu_ms" else {}))
            for op in facts.profile.top_ops if op["name"] not in drop]
    rows += [{"name": name, "self_cpu_ms": ms, "self_device_ms": ms if device == "cuda" else 0.0, "calls": n}
             for name, n, ms in extra]
    model = dataclasses.replace(facts.model, device=device)
    return dataclasses.replace(facts, env={"device": device}, model=model,
                               profile=dataclasses.replace(facts.profile, top_ops=rows), **changes)


def test_the_example_fires_with_the_measured_share_and_its_estimate():
    finding = attention_hand_written(_example())
    assert finding is not None and finding.id == ID and not finding.fix
    assert finding.evidence["attention_pct"] == 40.0 and finding.evidence["softmax_calls_per_step"] == 2.0
    assert finding.expected_speedup == pytest.approx(1 / (0.6 + 0.4 / 2.0))
    assert "s = 2.0 on cuda" in finding.formula and "assumed" in finding.formula
    assert "F.scaled_dot_product_attention(q, k, v, is_causal=True" in fix_torch(finding)
    assert fix_toml(finding).startswith("# no torchboost.toml key:")
    assert RULES[ID] is attention_hand_written and TECHNIQUE.section is None and not TECHNIQUE.levers


@pytest.mark.parametrize("fused", ["aten::_scaled_dot_product_flash_attention",
                                   "aten::_scaled_dot_product_efficient_attention",
                                   "aten::scaled_dot_product_attention",
                                   "aten::_safe_softmax",  # SDPA's math fallback: the same ops, called by SDPA
                                   "flash_attn::_flash_attn_forward"])
def test_silent_where_the_step_already_runs_a_fused_attention(fused):
    assert attention_hand_written(_with_ops(_example(), [(fused, 4, 1.0)])) is None


def test_the_twin_the_same_ops_without_a_fused_one_fire():
    assert attention_hand_written(_with_ops(_example(), [("aten::addmm", 4, 1.0)])) is not None


def test_silent_on_a_cpu_run_without_the_pattern():
    mlp = _with_ops(_example(), device="cpu", drop=[op["name"] for op in _example().profile.top_ops],
                    extra=[("aten::addmm", 12, 80.0), ("aten::mm", 24, 60.0), ("aten::threshold_backward", 4, 6.0),
                           ("aten::_log_softmax", 2, 2.0)])  # cross-entropy's softmax, no batched matmul
    assert attention_hand_written(mlp) is None
    assert ID not in {f.id for f in diagnose(mlp)}


def test_on_a_cpu_it_fires_without_dropout_and_not_with_it():
    no_dropout = _with_ops(_example(), device="cpu", drop=("aten::native_dropout", "aten::native_dropout_backward"))
    finding = attention_hand_written(no_dropout)
    assert finding is not None and "s = 1.5 on cpu" in finding.formula
    with_dropout = _with_ops(_example(), device="cpu")  # SDPA's CPU kernel takes no dropout: its math path
    assert attention_hand_written(with_dropout) is None
    drawn = dataclasses.replace(no_dropout, random_ops=["aten.bernoulli_"])
    assert attention_hand_written(drawn) is None


@pytest.mark.parametrize("facts", [
    lambda: dataclasses.replace(_example(), steps=[StepRecord(i, 1000.0) for i in range(10)]),
    lambda: _with_ops(_example(), drop=("aten::_softmax",)),
    lambda: _with_ops(_example(), extra=[("aten::_softmax", 40, 1.0)]),
], ids=["4% of a 1 s step", "no softmax between the matmuls", "fewer than two batched matmuls a softmax"])
def test_silent_where_the_pattern_is_small_or_incomplete(facts):
    assert attention_hand_written(facts()) is None


def test_silent_on_a_compiled_model_and_without_a_profile():
    compiled = dataclasses.replace(_example(), model=ModelFacts(class_name="GPT", device="cuda", compiled=True))
    assert attention_hand_written(compiled) is None
    assert attention_hand_written(dataclasses.replace(_example(), profile=None)) is None
    assert attention_ops(ProfileFacts(), "cuda") is None


# -- op tables a real profiler window recorded ----------------------------------------------------


class _Attention(nn.Module):
    """One causal self-attention layer: written by hand, or through SDPA (``fused``)."""

    def __init__(self, fused: bool, *, width: int = 32, heads: int = 4, length: int = 128, dropout: float = 0.0):
        super().__init__()
        self.fused, self.heads, self.dropout = fused, heads, dropout
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.register_buffer("causal", torch.ones(length, length, dtype=torch.bool).tril())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
            att = att.masked_fill(~self.causal[:T, :T], float("-inf"))
            att = F.dropout(att.softmax(dim=-1), self.dropout)
            y = att @ v
        return self.out(y.transpose(1, 2).reshape(B, T, C))


def _profiled(model: nn.Module, x: torch.Tensor, tmp_path) -> Facts:
    """Facts of three steps of ``model``, the last two in a profiler window as the doctor opens one."""
    device = x.device.type
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()  # each step's wall time is its own

    step()  # first calls (kernel choice, allocator) outside the window
    window, steps = ProfileWindow(tmp_path / "trace.json", warmup=1, active=2, cuda=device == "cuda"), []
    window.start()
    for index in range(3):
        start = time.perf_counter()
        step()
        steps.append(StepRecord(index, (time.perf_counter() - start) * 1e3))
        window.step()
    assert window.facts is not None, window.error
    return Facts(env={"device": device}, steps=steps, model=ModelFacts(class_name="Attention", device=device),
                 profile=window.facts)


@pytest.mark.parametrize("fused", [False, True])  # the twin: the same layer through SDPA
def test_a_real_profile_of_hand_written_attention_fires_and_sdpa_s_does_not(tmp_path, fused):
    torch.manual_seed(0)
    facts = _profiled(_Attention(fused), torch.randn(4, 128, 32), tmp_path)
    # attention_pct=0: the pattern is what is checked here, not how much of this machine's step it took.
    finding = attention_hand_written(facts, attention_pct=0.0)
    assert (finding is not None) is (not fused), facts.profile.top_ops
    if finding is not None:
        assert finding.evidence["softmax_calls_per_step"] == 1.0 and finding.evidence["attention_ms_per_step"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("fused", [False, True])  # the twin: the same layer through SDPA's fused kernels
def test_on_cuda_a_profiled_hand_written_attention_fires_and_sdpa_s_does_not(tmp_path, fused):
    torch.manual_seed(0)
    # Large enough that the attention's kernels, not the host's small ops, lead the op table.
    model = _Attention(fused, width=512, heads=8, length=1024, dropout=0.1).cuda()
    facts = _profiled(model, torch.randn(16, 1024, 512, device="cuda"), tmp_path)
    finding = attention_hand_written(facts, attention_pct=0.0)
    assert (finding is not None) is (not fused), facts.profile.top_ops
    if finding is not None:  # the kernels' own time, read from the device's side of the table
        assert finding.evidence["attention_ms_per_step"] > 0 and "s = 2.0 on cuda" in finding.formula
