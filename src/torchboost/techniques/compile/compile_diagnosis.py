"""Compile's diagnosis: an eager model whose forward and backward dominate the step.

Reads Facts only and returns a Finding or None; thresholds are keyword parameters with
their unit in the name. Declared by :data:`torchboost.techniques.compile.TECHNIQUE`.
"""

from __future__ import annotations

import statistics

from torchboost.config import Overlay
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import amdahl, r, view
from torchboost.techniques.compile.compile_settings import CompileConfig

__all__ = ["CPU_RECORDED_GAINS", "compile_enable", "cpu_estimate"]


_COMPILE_FACTOR = {"cuda": 1.3, "mps": 1.1}
"""Forward+backward's gain from torch.compile, by device (assumed, not measured): fused kernels
and less Python; on MPS a smaller one, Inductor's Metal backend being a prototype in torch."""
CPU_RECORDED_GAINS = (1.06, 1.05, 1.04, 1.21, 0.83, 0.85, 0.96)
"""torch.compile's whole-step gain recorded on quiet 2-core CPUs, one per shape (built-in GPT,
vision, nanoGPT at 400 and 5000 iterations, the built-in GPT with compile kept, gpt_char_full,
nanoGPT's shakespeare_char shape; avx2-only and avx512_bf16 machines), from
``benchmarks/RESULTS.md``, "The compile estimate on a CPU". Fixed numbers, not measured in the
run: a CPU's compile finding is an estimate from them, ranked by their median and repaid at
their highest; tune measures compile on the script itself."""

CPU_GAINS_SOURCE = 'benchmarks/RESULTS.md, "The compile estimate on a CPU"'
"""Where :data:`CPU_RECORDED_GAINS` were recorded, named in the finding's arithmetic."""


def cpu_estimate() -> tuple[float, float, float]:
    """(lowest, median, highest) of :data:`CPU_RECORDED_GAINS`: the CPU estimate's range."""
    gains = sorted(CPU_RECORDED_GAINS)
    return gains[0], statistics.median(gains), gains[-1]


def compile_enable(facts: Facts, *, compute_pct: float = 50.0, compile_cost_s: float = 60.0) -> Finding | None:
    """Forward+backward take at least ``compute_pct`` percent of the step, the model is not
    compiled and Inductor can compile here; skipped when the planned run is too short to pay
    back a compile of ``compile_cost_s`` seconds. On a CPU its gain is an estimate from the gains
    recorded on CPUs (:data:`CPU_RECORDED_GAINS`), not measured here: ranked by their median,
    repaid at their best; on CUDA and MPS, from an assumed factor (:data:`_COMPILE_FACTOR`)."""
    v, model = view(facts), facts.model
    if model is None or model.compiled or not facts.env.get("can_compile") or v.step_ms <= 0:
        return None
    f = v.compute_share
    if f * 100 < compute_pct or v.device not in (*_COMPILE_FACTOR, "cpu"):
        return None
    if v.device == "cpu":
        low, speedup, best = cpu_estimate()
        gains = ", ".join(f"{g:.2f}" for g in sorted(CPU_RECORDED_GAINS))
        estimate = (f"estimate, not measured here: median({gains}) = {speedup:.3f}, the whole-step gains "
                    f"torch.compile gave {len(CPU_RECORDED_GAINS)} shapes on 2-core CPUs ({CPU_GAINS_SOURCE}), "
                    f"from {low:.2f}x to {best:.2f}x a step; ranked by the median, repaid at the best")
    else:
        factor = _COMPILE_FACTOR[v.device]
        speedup = best = amdahl(f, factor)
        typical = "a small gain assumed for a prototype backend" if v.device == "mps" else "a typical gain"
        estimate = (f"estimate: 1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} forward+backward share "
                    f"(measured), s = {factor} on {v.device} ({typical}, not measured here)")
    saved_ms = v.step_ms - v.step_ms / best
    break_even = compile_cost_s * 1000.0 / saved_ms
    if facts.planned_steps is not None and facts.planned_steps < break_even:
        return None  # the compile would cost more than it saves over the whole run
    regional = model.parameters >= 100_000_000
    fix = Overlay.of(CompileConfig, mode="default", **({"scope": "regional"} if regional else {}))
    return Finding(
        id="compile.enable",
        title=f"The model runs eagerly and forward+backward are {f * 100:.0f}% of the step; compile it",
        evidence={
            "compute_pct": r(f * 100, 1),
            "step_ms": r(v.step_ms),
            "break_even_steps": int(break_even) + 1,
            "parameters": model.parameters,
            **({"planned_steps": facts.planned_steps} if facts.planned_steps is not None else {}),
        },
        fix=fix,
        expected_speedup=speedup,
        formula=f"{estimate}; pays back a {compile_cost_s:g} s compile (a typical first compile, not "
                f"measured) after {int(break_even) + 1} steps; tune measures both on this script",
        notes=[f"The first compile costs tens of seconds to minutes ({compile_cost_s:g} s assumed here; "
               "later runs load it from the compile cache in seconds) and new input shapes recompile; "
               "worth it for long runs.",
               "A compile that fails falls back to eager with a warning."]
              + (["Large model: regional compile (each repeated block) compiles much faster."] if regional else [])
              + (["On MPS Inductor's Metal backend is a prototype in torch and no peak of MPS is measured here: "
                  "tune measures compile on this script."] if v.device == "mps" else []),
    )
