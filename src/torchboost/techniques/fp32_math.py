"""Reduced-precision arithmetic inside fp32 matmuls and convolutions: ``[fp32_math]``.

The tensors stay fp32 and no dtype cast enters the model: the library computing a matmul or
a convolution is allowed to round its inputs internally. On a CPU with bf16 instructions
(AMX, avx512_bf16) oneDNN then runs fp32 matmuls and convolutions on its bf16 kernels
(``torch.backends.mkldnn.matmul.fp32_precision = "bf16"``, and ``.conv`` likewise; PyTorch
2.9+, default ``"none"``); on a CUDA GPU from Ampere on the same switch is TF32
(``torch.backends.cuda.matmul.fp32_precision = "tf32"`` and ``torch.backends.cudnn.conv``,
or the older ``allow_tf32`` flags where the installed torch lacks the new ones).

Modes: ``keep`` (torch's setting, as the script left it), ``ieee`` (full fp32 arithmetic),
``bf16`` (CPU) and ``tf32`` (CUDA). ``"auto"`` keeps torch's setting: the results change at
the rounding of the lower format, so the tuner measures it on the user's model and keeps it
only when it is faster and its losses stay within the reduced-precision tolerance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from torchboost.config import AUTO, KEEP, Overlay, check_choice
from torchboost.env import probe as probe_env
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts, StepRecord
from torchboost.evidence.rulekit import amdahl, matmul_share, r, view
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ProbeContext, QuickSwitch, ResolveContext, Resolution, Rule,
    Technique, TuneContext,
)

__all__ = ["Fp32MathConfig", "Fp32MathFacts", "apply_fp32_math", "fp32_math_lower", "measure_bf32_speedup",
           "quick_switch"]

MODES = ("ieee", "bf16", "tf32")
_DEVICE_MODE = {"cpu": "bf16", "cuda": "tf32"}
"""The one reduced mode each device's fp32 kernels offer."""


@dataclass(frozen=True, kw_only=True)
class Fp32MathConfig:
    """How fp32 matmuls and convolutions compute inside."""

    section: ClassVar[str] = "fp32_math"

    mode: str = AUTO
    """auto (torch's setting, as the script left it) | keep | ieee | bf16 (a CPU with AMX or
    avx512_bf16) | tf32 (a CUDA GPU from Ampere on)."""

    def __post_init__(self) -> None:
        check_choice("fp32_math.mode", self.mode, (AUTO, KEEP, *MODES))

    @classmethod
    def off(cls) -> "Fp32MathConfig":
        """torch's own setting, as the script left it."""
        return cls(mode=KEEP)


def _backends(device_type: str) -> list[Any]:
    """The ``fp32_precision`` holders of ``device_type``'s matmul and convolution libraries."""
    if device_type == "cpu":
        mkldnn = torch.backends.mkldnn
        return [b for b in (getattr(mkldnn, "matmul", None), getattr(mkldnn, "conv", None))
                if b is not None and hasattr(b, "fp32_precision")]
    if device_type == "cuda":
        return [b for b in (getattr(torch.backends.cuda, "matmul", None), getattr(torch.backends.cudnn, "conv", None))
                if b is not None and hasattr(b, "fp32_precision")]
    return []


def apply_fp32_math(mode: str, device_type: str) -> str | None:
    """Set ``mode`` ("ieee", "bf16", "tf32") on ``device_type``'s fp32 matmuls and convolutions;
    "keep" and "auto" leave them. Returns what was set, in words, or None."""
    if mode not in MODES:
        return None
    wanted = "none" if mode == "ieee" else mode
    holders = _backends(device_type)
    if holders:
        for holder in holders:
            holder.fp32_precision = wanted
        return f"fp32 matmuls and convolutions on {device_type} compute in {mode}"
    if device_type == "cuda":  # an older torch: the flags before fp32_precision
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        torch.backends.cudnn.allow_tf32 = mode == "tf32"
        return f"fp32 matmuls and convolutions on cuda compute in {mode} (allow_tf32)"
    return None


def _check_device(mode: str, env: Any) -> None:
    if mode == "bf16" and not (env.device == "cpu" and env.cpu_bf16 and _backends("cpu")):
        raise ValueError('fp32_math.mode "bf16" needs a CPU with AMX or avx512_bf16 and PyTorch 2.9 or newer '
                         f'(this run: {env.device}, bf16 instructions {bool(env.cpu_bf16)}); use "auto" or "ieee"')
    if mode == "tf32" and not (env.device == "cuda" and env.tf32):
        raise ValueError('fp32_math.mode "tf32" needs a CUDA GPU of compute capability 8.0 (Ampere) or newer; '
                         f'this run is on {env.device}: use "auto" or "ieee"')


def _resolve(ctx: ResolveContext) -> Resolution:
    mode = ctx.config.section(Fp32MathConfig).mode
    if mode == AUTO:
        return Resolution(Overlay.of(Fp32MathConfig, mode=KEEP),
                          {"fp32_math.mode": "auto keeps torch's fp32 arithmetic: tune measures bf16/TF32 math"})
    _check_device(mode, ctx.env)
    return Resolution(Overlay.of(Fp32MathConfig, mode=mode), {"fp32_math.mode": "set in config"})


def _apply(prep: Preparation) -> None:
    # A process-wide switch, set with the others before the model is touched.
    mode = prep.config.section(Fp32MathConfig).mode
    apply_fp32_math(mode, prep.device.type)


def _nocode_start(values: dict[str, Any], notes: list[str]) -> None:
    mode = values.get("mode")
    if not isinstance(mode, str):
        return
    # From outside the model's device is not known yet: each mode goes where it exists
    # ("ieee" to both, so neither library rounds).
    for device_type in {"bf16": ("cpu",), "tf32": ("cuda",), "ieee": ("cpu", "cuda")}.get(mode, ()):
        said = apply_fp32_math(mode, device_type)
        if said:
            notes.append(said)


def _propose(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    # On a CPU only: on CUDA, precision.mode "tf32" is the tuner's TF32 candidate.
    if ctx.device != "cpu" or not ctx.cpu_bf16 or not _backends("cpu"):
        return []
    return [Overlay.of(Fp32MathConfig, mode="bf16")]


def _hopeless(ctx: TuneContext) -> str | None:
    if ctx.device == "cpu" and not ctx.cpu_bf16:
        return "this CPU has no bf16 instructions (no AMX, no avx512_bf16): its fp32 kernels have no bf16 path"
    return None


def _spell(section: Fp32MathConfig) -> FrameworkSpelling:
    if section.mode not in MODES:
        return FrameworkSpelling()
    backend = ("torch.backends.mkldnn" if section.mode == "bf16" else "torch.backends.cuda")
    conv = ("torch.backends.mkldnn" if section.mode == "bf16" else "torch.backends.cudnn")
    value = "none" if section.mode == "ieee" else section.mode
    # No framework has a flag for it: the plain lines, before the model is built.
    return FrameworkSpelling(unflagged=(f'{backend}.matmul.fp32_precision = "{value}"',
                                        f'{conv}.conv.fp32_precision = "{value}"'))


# -- its facts and diagnosis ----------------------------------------------------------------

@dataclass(frozen=True)
class Fp32MathFacts:
    """The fp32 arithmetic the script's kernels ran with, and what bf16 math gives here."""

    technique: ClassVar[str] = "fp32_math"

    cpu_precision: str = "none"
    """``torch.backends.mkldnn.matmul.fp32_precision`` at the end of the warm-up ("n/a" without it)."""
    bf32_speedup: float | None = None
    """A 512x512 fp32 CPU matmul's median time, ieee over bf16 math, measured in the script's
    process (None: not measured: no bf16 path here, or not a CPU run)."""


def measure_bf32_speedup(size: int = 512, repeats: int = 9) -> float | None:
    """The median, over ``repeats`` interleaved pairs, of an fp32 CPU matmul's time with ieee
    arithmetic over its time with bf16 math (~0.1 s; pairs, so a neighbour taking the CPU
    for a moment slows both sides of one pair, not one side of the figure); the setting is
    restored. None where the CPU path has no such switch."""
    holders = _backends("cpu")
    if not holders:
        return None
    g = torch.Generator().manual_seed(0)  # never the user's global random stream
    a, b = torch.randn(size, size, generator=g), torch.randn(size, size, generator=g)
    before = [h.fp32_precision for h in holders]

    def timed(mode: str) -> float:
        holders[0].fp32_precision = mode
        start = time.perf_counter()
        torch.mm(a, b)
        return time.perf_counter() - start

    try:
        timed("none"), timed("bf16")  # first calls pick and load the kernels
        ratios = sorted(timed("none") / timed("bf16") for _ in range(repeats))
        return ratios[len(ratios) // 2]
    finally:
        for holder, value in zip(holders, before):
            holder.fp32_precision = value


def _probe(ctx: ProbeContext) -> Fp32MathFacts:
    holders = _backends("cpu")
    current = holders[0].fp32_precision if holders else "n/a"
    measured = None
    if ctx.device == "cpu" and holders and current == "none" and probe_env().cpu_bf16:
        measured = measure_bf32_speedup()
    return Fp32MathFacts(cpu_precision=str(current), bf32_speedup=measured)


def fp32_math_lower(facts: Facts, *, compute_pct: float = 50.0, bf32_min_speedup: float = 1.05) -> Finding | None:
    """fp32 forward+backward take at least ``compute_pct`` percent of a CPU step whose matmuls
    run with full fp32 arithmetic, where bf16 math measured at least ``bf32_min_speedup``x."""
    v, seen = view(facts), facts.seen(Fp32MathFacts)
    f, measured = v.compute_share, seen.bf32_speedup
    if v.device != "cpu" or seen.cpu_precision != "none" or measured is None or measured < bf32_min_speedup:
        return None
    if f * 100 < compute_pct:
        return None
    share = matmul_share(facts.profile)
    factor = measured if share is None else amdahl(share, measured)
    share_note = "all forward+backward time taken as matmul/conv" if share is None \
        else f"matmul/conv share m = {share:.2f} of profiled op time"
    speedup = amdahl(f, factor)
    return Finding(
        id="fp32_math.bf16",
        title=f"fp32 matmuls run with full fp32 arithmetic ({f * 100:.0f}% of the step); let oneDNN use bf16 math",
        evidence={"compute_pct": r(f * 100, 1), "device": "cpu", "fp32_precision": "none",
                  "bf32_speedup": r(measured)},
        fix=Overlay.of(Fp32MathConfig, mode="bf16"),
        expected_speedup=speedup,
        dtype="bf16",
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} forward+backward share, s = {factor:.3f} "
                f"from the measured bf16-math matmul speedup {measured:.2f}, {share_note}",
        notes=["The tensors stay fp32, but matmuls round their inputs to bf16: torchboost tune keeps it only "
               "if the loss trajectory stays within the reduced-precision tolerance."],
    )


def quick_switch(ctx: ProbeContext) -> QuickSwitch | None:
    """bf16 math (TF32 on CUDA) in fp32 matmuls and convolutions, as a switch the doctor turns
    on for a step and off again (each holder's own value put back); None where the device has
    no such switch or the script already set one."""
    mode = _DEVICE_MODE.get(ctx.device)
    holders = _backends(ctx.device)
    if mode is None or not holders:
        return None
    before = [h.fp32_precision for h in holders]
    if any(value != "none" for value in before):
        return None  # the script chose its fp32 arithmetic itself

    def off() -> None:
        for holder, value in zip(holders, before):
            holder.fp32_precision = value

    return QuickSwitch("fp32_math.bf16", f"{mode} math in fp32 matmuls",
                       on=lambda: apply_fp32_math(mode, ctx.device), off=off,
                       setting=Overlay.of(Fp32MathConfig, mode=mode).to_dict())


def _example() -> Facts:
    """A CPU step, forward and backward 80% of it in fp32, where bf16 math measured 2x."""
    steps = [StepRecord(i, 100.0, 5.0, 40.0, 40.0, 5.0) for i in range(10)]
    return Facts(env={"device": "cpu", "cpu_cores": 8, "cpu_bf16": True}, steps=steps,
                 techniques={"fp32_math": Fp32MathFacts(cpu_precision="none", bf32_speedup=2.0)})


TECHNIQUE = Technique(
    name="fp32_math",
    title="bf16/TF32 math in fp32 matmuls",
    after=("cudnn",),
    before=("precision",),
    placed="a process-wide switch, set with the others before the model is touched",
    section=Fp32MathConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(at_start=_nocode_start),
    levers=(Lever("fp32_math", "bf16 math in fp32 matmuls (fp32_math)", Parity.REDUCED, _propose,
                  ("fp32_math.bf16",), priority=35, hopeless=_hopeless, probed_by="fp32_math.bf16"),),
    spell=_spell,
    facts=Fp32MathFacts,
    probe=_probe,
    rules=(Rule("fp32_math.bf16", fp32_math_lower, example=_example),),
    quick_probe=quick_switch,
)
