"""The torch.compile modes tune tries, and when max-autotune can repay its compile.

The default compile is tried wherever Inductor runs; on CUDA, reduce-overhead too (CUDA
graphs, for launch-bound steps: their capture adds little to the default compile).
max-autotune benchmarks candidate kernels for the model's matmuls and convolutions: its
first compile takes minutes, which a five-minute tune cannot spare and a short run
cannot repay. It is proposed only where the search's budget and the planned run both
leave room for its expected compile (:func:`autotune_refusal`); tune then measures it,
its compile time included, like any other candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchboost.evidence.observed import Facts
from torchboost.techniques._tuning import TuneContext
from torchboost.techniques.compile.compile_facts import CompileFacts

__all__ = ["AUTOTUNE_BUDGET_SHARE", "AUTOTUNE_COMPILE_MULTIPLE", "AUTOTUNE_MIN_COMPILE_S", "AUTOTUNE_STEP_GAIN",
           "CompileTuning", "autotune_compile_s", "autotune_refusal", "compile_modes", "compile_tune_context"]

AUTOTUNE_COMPILE_MULTIPLE = 5.0
"""max-autotune's first compile, in multiples of the default compile's where the doctor's
run measured one from scratch (assumed: its kernel search benchmarks several kernels for
each matmul and convolution the default compile picks one for)."""
AUTOTUNE_MIN_COMPILE_S = 120.0
"""max-autotune's first compile where no compile was measured, seconds (assumed: minutes
on a real model, two at the least)."""
AUTOTUNE_BUDGET_SHARE = 0.25
"""The most of the search's budget max-autotune's first compile may take: the baseline, the
other levers' trials and the pairs that confirm a candidate need the rest."""
AUTOTUNE_STEP_GAIN = 0.1
"""The most of a step its kernel search is assumed to save: the planned run must be at least
1 / this times its expected compile to repay it."""


def autotune_compile_s(ctx: TuneContext) -> tuple[float, str]:
    """max-autotune's expected first compile in seconds, and how it was reckoned, in words."""
    seen = ctx.seen(CompileFacts)
    if seen.compile_s > 0 and seen.cache == "cold":
        return (AUTOTUNE_COMPILE_MULTIPLE * seen.compile_s,
                f"{AUTOTUNE_COMPILE_MULTIPLE:g} x the {seen.compile_s:.1f} s compile the doctor's run measured")
    return AUTOTUNE_MIN_COMPILE_S, f"at least {AUTOTUNE_MIN_COMPILE_S:g} s (no compile measured here)"


def autotune_refusal(ctx: TuneContext) -> str | None:
    """Why max-autotune cannot repay its compile here, in words; None when the search's
    budget and the planned run both leave room for it."""
    compile_s, how = autotune_compile_s(ctx)
    if ctx.budget_s is None or compile_s > AUTOTUNE_BUDGET_SHARE * ctx.budget_s:
        budget = "an unknown budget" if ctx.budget_s is None else f"the search's {ctx.budget_s:.0f} s"
        return (f"max-autotune's first compile ({how}) would take over {AUTOTUNE_BUDGET_SHARE:.0%} of {budget}: "
                "give tune a larger --budget to try it")
    if ctx.planned_steps is None or not ctx.step_ms:
        return "the planned run's length is not known (pass --run-steps): max-autotune's compile cannot be judged"
    most_saved_s = ctx.planned_steps * ctx.step_ms / 1e3 * AUTOTUNE_STEP_GAIN
    if most_saved_s < compile_s:
        return (f"{ctx.planned_steps} steps x {ctx.step_ms:.1f} ms save at most {most_saved_s:.0f} s at "
                f"{AUTOTUNE_STEP_GAIN:.0%} of a step, less than max-autotune's first compile ({how})")
    return None


@dataclass(frozen=True)
class CompileTuning:
    """What the tuner's compile lever knows of the script."""

    can_compile: bool = True
    """torch.compile can run here and the script does not compile its model itself."""


def compile_tune_context(facts: Facts) -> CompileTuning:
    """Compile's tuning facts from the doctor's: a script that compiles its model itself
    leaves nothing to try."""
    env = facts.env or {}
    return CompileTuning(can_compile=bool(env.get("can_compile", True)) and not (facts.model and facts.model.compiled))


def compile_modes(ctx: TuneContext) -> tuple[str, ...]:
    """The modes to try: none where compile cannot run or the script compiles its model
    itself; the default one on a CPU; on CUDA reduce-overhead too, and max-autotune where it
    can repay its compile."""
    if not ctx.own(CompileTuning).can_compile:
        return ()
    if ctx.device != "cuda":
        return ("default",)
    return ("default", "reduce-overhead", *(("max-autotune",) if autotune_refusal(ctx) is None else ()))
