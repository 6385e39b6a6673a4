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

from torchboost import _fp32_precision as switches
from torchboost.config import AUTO, KEEP, Overlay, check_choice
from torchboost.env import probe as probe_env
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts, ModelFacts, ProfileFacts, StepRecord
from torchboost.evidence.rulekit import amdahl, matmul_share, r, view
from torchboost.limits.cache import cached_limits
from torchboost.techniques.precision.precision_diagnosis import PrecisionFacts, PrecisionTuning, reduced_precision
from torchboost.techniques.precision.precision_settings import PrecisionConfig
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ProbeContext, QuickSwitch, ResolveContext, Resolution, Rule,
    Technique, TuneContext,
)

__all__ = ["Fp32MathConfig", "Fp32MathFacts", "apply_fp32_math", "fp32_matmul_dtype", "fp32_math_lower", "measure_bf32_speedup",
           "quick_switch"]

MODES = ("ieee", "bf16", "tf32")


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


_SWITCHES = {"cpu": switches.CPU_SWITCHES, "cuda": switches.CUDA_SWITCHES}
"""Each device's switches for the arithmetic in fp32 matmuls and convolutions
(:mod:`torchboost._fp32_precision`, the one place they are read and written)."""


def _has_switches(device_type: str) -> bool:
    """Whether this torch can set ``device_type``'s fp32 arithmetic: oneDNN's from PyTorch 2.9
    on; CUDA's always (the ``allow_tf32`` flags before 2.9)."""
    return device_type == "cuda" or any(switches.has_switch(n) for n in _SWITCHES.get(device_type, ()))


def apply_fp32_math(mode: str, device_type: str) -> str | None:
    """Set ``mode`` ("ieee", "bf16", "tf32") on ``device_type``'s fp32 matmuls and convolutions;
    "keep" and "auto" leave them. Returns what was set, in words, or None."""
    if mode not in MODES or not _has_switches(device_type):
        return None
    wanted = "none" if mode == "ieee" else mode
    switches.set_switches({name: wanted for name in _SWITCHES[device_type]})
    older = "" if device_type != "cuda" or switches.has_switch("cuda.matmul") else " (allow_tf32)"
    return f"fp32 matmuls and convolutions on {device_type} compute in {mode}{older}"


def _check_device(mode: str, env: Any) -> None:
    if mode == "bf16" and not (env.device == "cpu" and env.cpu_bf16 and _has_switches("cpu")):
        raise ValueError('fp32_math.mode "bf16" needs a CPU with AMX or avx512_bf16 and PyTorch 2.9 or newer '
                         f'(this run: {env.device}, bf16 instructions {bool(env.cpu_bf16)}); use "auto" or "ieee"')
    if mode == "tf32" and not (env.device == "cuda" and env.tf32):
        raise ValueError('fp32_math.mode "tf32" needs a CUDA GPU of compute capability 8.0 (Ampere) or newer; '
                         f'this run is on {env.device}: use "auto" or "ieee"')


def fp32_matmul_dtype(settings: Overlay) -> str | None:
    """The dtype fp32 matmuls compute in under ``settings`` ("bf16", "tf32"); None: fp32."""
    mode = settings.section(Fp32MathConfig).get("mode")
    return mode if mode in ("bf16", "tf32") else None


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
    # bf16 math on a CPU; on CUDA the "tf32" lever below.
    if ctx.device != "cpu" or not ctx.own(PrecisionTuning).cpu_bf16 or not _has_switches("cpu"):
        return []
    return [Overlay.of(Fp32MathConfig, mode="bf16")]


def _propose_tf32(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    # Not on top of a kept autocast: its matmuls already run in bf16/fp16, and what stays
    # fp32 there (norms, reductions, the loss) TF32 does not touch.
    if ctx.device != "cuda" or not ctx.own(PrecisionTuning).tf32 or incumbent.section(PrecisionConfig):
        return []
    return [Overlay.of(Fp32MathConfig, mode="tf32")]


def _hopeless(ctx: TuneContext) -> str | None:
    if ctx.device == "cpu" and not ctx.own(PrecisionTuning).cpu_bf16:
        return "this CPU has no bf16 instructions (no AMX, no avx512_bf16): its fp32 kernels have no bf16 path"
    return None


def _spell(section: Fp32MathConfig) -> FrameworkSpelling:
    if section.mode not in MODES:
        return FrameworkSpelling()
    value = "none" if section.mode == "ieee" else section.mode
    names = switches.CPU_SWITCHES if section.mode == "bf16" else switches.CUDA_SWITCHES
    lines = switches.spelling({name: value for name in names})
    if section.mode == "bf16" and not lines:  # a torch without oneDNN's switch: the lines to write on one with it
        lines = tuple(f'torch.backends.{name}.fp32_precision = "bf16"' for name in names)
    # No framework has a flag for it: the plain lines, before the model is built.
    return FrameworkSpelling(unflagged=lines)


# -- its facts and diagnosis ----------------------------------------------------------------

@dataclass(frozen=True)
class Fp32MathFacts:
    """The fp32 arithmetic the script's kernels ran with, and what bf16 math or TF32 gives here."""

    technique: ClassVar[str] = "fp32_math"

    cpu_precision: str = "none"
    """``torch.backends.mkldnn.matmul.fp32_precision`` at the end of the warm-up ("n/a" without it)."""
    bf32_speedup: float | None = None
    """A 512x512 fp32 CPU matmul's median time, ieee over bf16 math, measured in the script's
    process (None: not measured: no bf16 path here, or not a CPU run)."""
    tf32_peak_ratio: float | None = None
    """On CUDA, this GPU's TF32 matmul peak over its fp32 one as the limits probe measured
    them (``torchboost probe``; read from its cache, never measured in the run); None when
    the cache has no TF32 peak for this GPU (not yet probed, or not a GPU with TF32)."""


def measure_bf32_speedup(size: int = 512, repeats: int = 9) -> float | None:
    """The median, over ``repeats`` interleaved pairs, of an fp32 CPU matmul's time with ieee
    arithmetic over its time with bf16 math (~0.1 s; pairs, so a neighbour taking the CPU
    for a moment slows both sides of one pair, not one side of the figure); the setting is
    restored. None where the CPU path has no such switch."""
    if not switches.has_switch("mkldnn.matmul"):
        return None
    g = torch.Generator().manual_seed(0)  # never the user's global random stream
    a, b = torch.randn(size, size, generator=g), torch.randn(size, size, generator=g)
    saved = switches.set_switches({"mkldnn.matmul": "none"})

    def timed(mode: str) -> float:
        switches.set_switches({"mkldnn.matmul": mode})
        start = time.perf_counter()
        torch.mm(a, b)
        return time.perf_counter() - start

    try:
        timed("none"), timed("bf16")  # first calls pick and load the kernels
        ratios = sorted(timed("none") / timed("bf16") for _ in range(repeats))
        return ratios[len(ratios) // 2]
    finally:
        saved.restore()


def _tf32_peak_ratio() -> float | None:
    limits = cached_limits("cuda")
    tf32, fp32 = (limits.peak_flops_per_s("tf32"), limits.peak_flops_per_s("fp32")) if limits else (None, None)
    return tf32 / fp32 if tf32 and fp32 else None


def _probe(ctx: ProbeContext) -> Fp32MathFacts:
    current = switches.read_switches(("mkldnn.matmul",)).get("mkldnn.matmul", "n/a")
    measured = None
    if ctx.device == "cpu" and current == "none" and _has_switches("cpu") and probe_env().cpu_bf16:
        measured = measure_bf32_speedup()
    ratio = _tf32_peak_ratio() if ctx.device == "cuda" else None
    return Fp32MathFacts(cpu_precision=str(current), bf32_speedup=measured, tf32_peak_ratio=ratio)


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


_TF32_ASSUMED = 2.0
"""fp32 matmul kernels in TF32 over IEEE fp32 where the limits probe has not measured this
GPU's peaks (assumed; ``torchboost probe`` measures them, and the doctor's quick probe times
the step itself)."""
_TF32_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")
"""cuBLAS's fp32 matmuls: what ``torch.backends.cuda.matmul.fp32_precision`` switches."""
_CONV_OPS = ("aten::convolution", "aten::_convolution", "aten::cudnn_convolution", "aten::convolution_backward")
"""cuDNN's convolutions: what ``torch.backends.cudnn.conv.fp32_precision`` switches."""


def _tf32_share(profile: ProfileFacts | None, ops: tuple[str, ...]) -> float | None:
    """Share (0..1) of the profiled GPU op time (host time where no device time was recorded)
    in ``ops``; None without a profile."""
    rows = profile.top_ops if profile else []
    key = "self_device_ms" if any(float(op.get("self_device_ms") or 0.0) > 0 for op in rows) else "self_cpu_ms"
    total = sum(float(op.get(key) or 0.0) for op in rows)
    if total <= 0:
        return None
    return sum(float(op.get(key) or 0.0) for op in rows if str(op.get("name", "")).startswith(ops)) / total


def fp32_math_tf32(facts: Facts, *, compute_pct: float = 50.0, tf32_ops_pct: float = 10.0) -> Finding | None:
    """A CUDA step on a GPU with TF32 (Ampere on) whose fp32 matmuls run without it: forward
    and backward take at least ``compute_pct`` percent of the step, and the matmuls (with
    the convolutions, where cuDNN's TF32 is off too) at least ``tf32_ops_pct`` percent of
    the profiled GPU op time. Silent on a CPU, under autocast, and once TF32 is on."""
    v, p = view(facts), facts.seen(PrecisionFacts)
    if v.device != "cuda" or not facts.env.get("tf32") or p.tf32_matmul or reduced_precision(facts):
        return None
    f = v.compute_share
    ops = _TF32_OPS + (() if p.tf32_cudnn else _CONV_OPS)
    m = _tf32_share(facts.profile, ops)
    if f * 100 < compute_pct or m is None or m * 100 < tf32_ops_pct:
        return None
    ratio = facts.seen(Fp32MathFacts).tf32_peak_ratio
    s = ratio if ratio else _TF32_ASSUMED
    how = (f"the TF32/fp32 matmul peak ratio the limits probe measured on this GPU" if ratio
           else "assumed (the limits probe has not measured this GPU's TF32 peak: torchboost probe)")
    speedup = amdahl(f * m, s)
    what = "matmuls" if p.tf32_cudnn else "matmuls and convolutions"
    return Finding(
        id="fp32_math.tf32",
        title=f"fp32 {what} run without TF32 ({m * 100:.0f}% of the GPU's op time); allow TF32",
        evidence={"compute_pct": r(f * 100, 1), "device": "cuda", "tf32_matmul": "false",
                  "tf32_cudnn": str(p.tf32_cudnn).lower(), "tf32_ops_pct": r(m * 100, 1),
                  **({"tf32_peak_ratio": r(ratio)} if ratio else {})},
        fix=Overlay.of(Fp32MathConfig, mode="tf32"),
        expected_speedup=speedup,
        dtype="tf32",
        formula=f"1 / (1 - f m + f m / s) = {speedup:.3f}; f = {f:.3f} forward+backward share, m = {m:.2f} "
                f"fp32 {what}' share of the profiled GPU op time, s = {s:.2f}: {how}",
        notes=["The tensors stay fp32, but TF32 rounds matmul inputs to a 10-bit mantissa: torchboost tune keeps "
               "it only if the loss trajectory stays within the reduced-precision tolerance."],
    )


def _cpu_switch(ctx: ProbeContext) -> QuickSwitch | None:
    found = switches.read_switches(switches.CPU_SWITCHES)
    if not found or any(value != "none" for value in found.values()):
        return None  # no such switch, or the script chose its fp32 arithmetic itself
    saved: list[switches.Saved] = []

    def off() -> None:
        while saved:
            saved.pop().restore()

    return QuickSwitch("fp32_math.bf16", "bf16 math in fp32 matmuls",
                       on=lambda: saved.append(switches.set_switches(dict.fromkeys(found, "bf16"))), off=off,
                       setting=Overlay.of(Fp32MathConfig, mode="bf16").to_dict())


def _cuda_switch(ctx: ProbeContext) -> QuickSwitch | None:
    if not probe_env().tf32 or switches.tf32_state().matmul:
        return None  # no TF32 on this GPU, or the script allowed it itself
    saved: list[switches.Saved] = []

    def off() -> None:
        while saved:
            saved.pop().restore()

    return QuickSwitch("fp32_math.tf32", "TF32 in fp32 matmuls and convolutions",
                       on=lambda: saved.append(switches.set_tf32(True)), off=off,
                       setting=Overlay.of(Fp32MathConfig, mode="tf32").to_dict())


def quick_switch(ctx: ProbeContext) -> QuickSwitch | None:
    """bf16 math in fp32 matmuls and convolutions on a CPU, TF32 on a CUDA GPU (Ampere on), as a
    switch the doctor turns on for a step and off again (each switch's own value put back,
    through :mod:`torchboost._fp32_precision`); None where the device has no such switch or
    the script already set one."""
    if ctx.device == "cpu":
        return _cpu_switch(ctx)
    return _cuda_switch(ctx) if ctx.device == "cuda" else None


def _example() -> Facts:
    """A CPU step, forward and backward 80% of it in fp32, whose facts give bf16 math 2x."""
    steps = [StepRecord(i, 100.0, 5.0, 40.0, 40.0, 5.0) for i in range(10)]
    return Facts(env={"device": "cpu", "cpu_cores": 8, "cpu_bf16": True}, steps=steps,
                 techniques={"fp32_math": Fp32MathFacts(cpu_precision="none", bf32_speedup=2.0)})


def _tf32_example() -> Facts:
    """A CUDA step on an Ampere GPU, forward and backward 80% of it in fp32 with TF32 off, its
    matmuls 75% of the GPU's op time, whose limits give TF32 8x fp32's peak."""
    steps = [StepRecord(i, 100.0, 5.0, 40.0, 40.0, 5.0) for i in range(10)]
    ops = [{"name": "aten::mm", "self_cpu_ms": 2.0, "self_device_ms": 60.0, "calls": 6},
           {"name": "aten::add_", "self_cpu_ms": 1.0, "self_device_ms": 20.0, "calls": 12}]
    return Facts(env={"device": "cuda", "tf32": True, "cuda_bf16": True}, steps=steps,
                 model=ModelFacts(class_name="MLP", param_dtypes=["float32"], device="cuda:0"),
                 profile=ProfileFacts(steps=1, top_ops=ops),
                 techniques={"precision": PrecisionFacts(tf32_matmul=False),
                             "fp32_math": Fp32MathFacts(tf32_peak_ratio=8.0)})


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
                  ("fp32_math.bf16",), priority=35, hopeless=_hopeless, probed_by="fp32_math.bf16"),
            Lever("tf32", "TF32 in fp32 matmuls and convolutions", Parity.REDUCED, _propose_tf32,
                  ("fp32_math.tf32",), priority=40, probed_by="fp32_math.tf32"),),
    spell=_spell,
    facts=Fp32MathFacts,
    probe=_probe,
    rules=(Rule("fp32_math.bf16", fp32_math_lower, example=_example),
           Rule("fp32_math.tf32", fp32_math_tf32, example=_tf32_example)),
    quick_probe=quick_switch,
)
