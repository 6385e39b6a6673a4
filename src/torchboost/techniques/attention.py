"""Attention written by hand: matmuls around a softmax where one fused kernel would do.

``att = q @ k.transpose(-2, -1) * scale``, a ``masked_fill``, ``softmax``, ``dropout``,
then ``att @ v``: each op writes the whole ``T x T`` attention matrix to memory and reads
it back, forward and backward. ``torch.nn.functional.scaled_dot_product_attention``
computes the same maths in fused kernels (flash or memory-efficient ones on CUDA, a flash
kernel on a CPU) that never write that matrix out.

The finding reads what the observed run already records: the profiler window's op table
(:attr:`~torchboost.evidence.observed.ProfileFacts.top_ops`). It fires where batched
matmuls (two or more per softmax: ``q @ k^T`` and ``att @ v``) and a softmax take a share
of the step and no fused attention op ran. It is advice: the fix is a change to the
model's code, which no ``torchboost.toml`` key makes.

On a CPU it stays silent where the step draws dropout: scaled_dot_product_attention's CPU
kernel takes none, and with dropout it runs the very ops written by hand (its math path).
"""

from __future__ import annotations

from dataclasses import dataclass

from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts, ModelFacts, ProfileFacts, StepRecord
from torchboost.evidence.rulekit import amdahl, r, view
from torchboost.techniques.registry import Rule, Technique

__all__ = ["ATTENTION_OPS", "FUSED_ATTENTION", "TECHNIQUE", "attention_hand_written", "attention_ops"]

SOFTMAX_OPS = ("aten::_softmax", "aten::softmax")
"""The softmax's forward op (the kernel, else its composite when the kernel is not listed)."""
BATCHED_MATMUL_OPS = ("aten::bmm", "aten::baddbmm")
"""What ``q @ k.transpose(-2, -1)`` and ``att @ v`` of 4-D tensors run, forward and backward."""
DROPOUT_OPS = ("aten::native_dropout", "aten::native_dropout_backward", "aten::bernoulli_")
"""Dropout's ops that draw and apply a mask (``aten::dropout`` alone may be one of ``p=0``, which returns its input)."""
ATTENTION_OPS = (*BATCHED_MATMUL_OPS, "aten::matmul", *SOFTMAX_OPS, "aten::_softmax_backward_data",
                 "aten::masked_fill", "aten::masked_fill_", *DROPOUT_OPS)
"""The ops hand-written attention runs; their self time is the share a fused kernel replaces."""
FUSED_ATTENTION = ("scaled_dot_product", "_safe_softmax", "flash_attn", "flash_attention", "efficient_attention",
                   "xformers")
"""Parts of op names that mean the step already calls a fused attention (PyTorch's SDPA in any of
its kernels, its math fallback's ``_safe_softmax`` included, flash-attn's, xFormers')."""

_FUSED_FACTOR = {"cuda": 2.0, "cpu": 1.5}
"""Attention ops' time over the fused kernel's, forward and backward (assumed: FlashAttention
reports 2-4x on CUDA; on a CPU, SDPA's flash kernel gains less)."""


@dataclass(frozen=True)
class AttentionOps:
    """What the op table shows of the step's attention, per profiled step."""

    ms: float
    """Self time of the attention ops (device time on CUDA, CPU time otherwise), ms per step."""
    matmul_calls: float
    """Batched matmul calls (forward and backward) per step."""
    softmax_calls: float
    """Softmax forward calls per step."""
    dropout: bool
    """A dropout op ran in the step (in the attention or elsewhere)."""
    words: str
    """The largest of them, "aten::bmm 12.0 ms, ..." per step."""


def attention_ops(profile: ProfileFacts | None, device: str) -> AttentionOps | None:
    """The step's attention as the op table shows it; None when there is no profile, no
    softmax between batched matmuls, or a fused attention op ran."""
    if profile is None or profile.steps <= 0 or not profile.top_ops:
        return None
    ops = profile.top_ops
    if any(part in str(op.get("name", "")) for op in ops for part in FUSED_ATTENTION):
        return None
    key = "self_device_ms" if device == "cuda" else "self_cpu_ms"
    steps = profile.steps

    def calls(names: tuple[str, ...]) -> float:
        return sum(float(op.get("calls") or 0) for op in ops if op.get("name") in names) / steps

    softmax = calls(SOFTMAX_OPS[:1]) or calls(SOFTMAX_OPS[1:])
    matmuls = calls(BATCHED_MATMUL_OPS)
    if softmax <= 0 or matmuls < 2 * softmax:  # q @ k^T and att @ v around each softmax
        return None
    timed = sorted(((float(op.get(key) or 0.0) / steps, str(op["name"])) for op in ops
                    if op.get("name") in ATTENTION_OPS), reverse=True)
    words = ", ".join(f"{name} {ms:.1f} ms" for ms, name in timed[:4])
    return AttentionOps(ms=sum(ms for ms, _ in timed), matmul_calls=matmuls, softmax_calls=softmax,
                        dropout=any(op.get("name") in DROPOUT_OPS for op in ops), words=words)


def _draws_dropout(facts: Facts) -> bool:
    """The step's random ops (counted beside its FLOPs) include dropout's."""
    return any("dropout" in op or "bernoulli" in op for op in facts.random_ops)


_ADVICE_CODE = """\
# in place of: att = (q @ k.transpose(-2, -1)) * scale; att = att.masked_fill(mask, float("-inf"))
#              att = F.softmax(att, dim=-1); att = F.dropout(att, p, self.training); y = att @ v
y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p if self.training else 0.0)"""


def attention_hand_written(facts: Facts, *, attention_pct: float = 10.0) -> Finding | None:
    """Batched matmuls around a softmax (attention written by hand) take at least
    ``attention_pct`` percent of the step, on CUDA or a CPU, and no fused attention op ran;
    on a CPU only where the step draws no dropout (SDPA's CPU kernel takes none)."""
    v = view(facts)
    if v.device not in _FUSED_FACTOR or v.step_ms <= 0 or (facts.model is not None and facts.model.compiled):
        return None  # a compiled model's op table shows Inductor's kernels, which may fuse it already
    ops = attention_ops(facts.profile, v.device)
    if ops is None or (v.device == "cpu" and (ops.dropout or _draws_dropout(facts))):
        return None
    f = min(ops.ms / v.step_ms, 1.0)
    if f * 100 < attention_pct:
        return None
    factor = _FUSED_FACTOR[v.device]
    speedup = amdahl(f, factor)
    return Finding(
        id="attention.hand_written",
        title=f"Attention runs as separate matmul and softmax ops, {f * 100:.0f}% of the step; "
              "use F.scaled_dot_product_attention",
        evidence={"attention_pct": r(f * 100, 1), "attention_ms_per_step": r(ops.ms), "step_ms": r(v.step_ms),
                  "matmul_calls_per_step": r(ops.matmul_calls, 1), "softmax_calls_per_step": r(ops.softmax_calls, 1),
                  "attention_ops": ops.words},
        advice="call torch.nn.functional.scaled_dot_product_attention where the model multiplies q by k, "
               "masks, takes the softmax and multiplies by v: one fused kernel does it all",
        advice_code=_ADVICE_CODE,
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} the step's share in the attention ops "
                f"(batched matmuls, softmax and its backward, masked_fill, dropout: measured), s = {factor} on "
                f"{v.device} (a fused kernel's typical gain over them, assumed, not measured here)",
        notes=["is_causal=True stands for a lower-triangular mask; any other mask goes in attn_mask= (a boolean "
               "attn_mask is True where attention is allowed: the opposite of masked_fill's mask).",
               "The same maths: the T x T attention matrix is never written out, so memory falls too. On CUDA "
               "flash kernels take fp16/bf16; fp32 runs the memory-efficient one. Check the loss curve after it.",
               "nn.MultiheadAttention computes its attention by hand when it returns its weights: pass "
               "need_weights=False.",
               "A script that already calls scaled_dot_product_attention ran its math fallback, these same ops: "
               "its inputs suited no fused kernel (torch.nn.attention.sdpa_kernel says which may run)."],
    )


def _example() -> Facts:
    """A CUDA step of 100 ms, 40 ms of it in attention written by hand (two layers, two steps profiled)."""
    ops = [("aten::bmm", 24, 36.0), ("aten::_softmax", 4, 14.0), ("aten::_softmax_backward_data", 4, 14.0),
           ("aten::masked_fill_", 4, 8.0), ("aten::native_dropout", 4, 4.0),
           ("aten::native_dropout_backward", 4, 4.0), ("aten::addmm", 16, 60.0)]
    profile = ProfileFacts(steps=2, top_ops=[{"name": name, "self_cpu_ms": 1.0, "self_device_ms": ms, "calls": n}
                                             for name, n, ms in ops])
    return Facts(env={"device": "cuda"}, steps=[StepRecord(i, 100.0, 5.0, 40.0, 50.0, 5.0) for i in range(10)],
                 model=ModelFacts(class_name="GPT", device="cuda"), profile=profile)


TECHNIQUE = Technique(
    name="attention",
    title="fused attention (scaled_dot_product_attention)",
    placed="advice only: it applies nothing to the run, its fix is in the model's code",
    nocode_refusal="it is advice: the fix is a change to the model's code",
    rules=(Rule("attention.hand_written", attention_hand_written, example=_example),),
)
