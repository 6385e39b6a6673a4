"""Precision's diagnoses: fp32 compute where a lower precision runs faster, and the reverse.

Each rule reads Facts only and returns a Finding or None; thresholds are keyword
parameters with their unit in the name. Factors marked "assumed" are typical published
gains; the tuner measures the real one. Declared by
:data:`torchboost.techniques.precision.TECHNIQUE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torchboost import _fp32_precision
from torchboost.config import Overlay
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import REDUCED_DTYPES, amdahl, dtype_name, matmul_share, r, view
from torchboost.techniques.precision.precision_settings import PrecisionConfig
from torchboost.techniques.registry import ProbeContext

__all__ = ["PrecisionFacts", "PrecisionTuning", "precision_lower", "precision_slower_on_cpu", "probe_precision",
           "reduced_precision", "tune_context"]


@dataclass(frozen=True)
class PrecisionFacts:
    """The numeric settings in effect during the observed forward passes."""

    technique: ClassVar[str] = "precision"

    autocast: bool = False
    autocast_dtype: str | None = None
    """"bfloat16" / "float16" when autocast was on, else None."""
    grad_scaler: bool = False
    """A GradScaler drove the optimizer step."""
    tf32_matmul: bool = False
    """cuBLAS may run fp32 matmuls in TF32 (``torch.backends.cuda.matmul.fp32_precision`` is
    "tf32"; on a torch before 2.9, the float32 matmul precision below "highest")."""
    tf32_cudnn: bool = True
    """cuDNN may run fp32 convolutions in TF32 (``torch.backends.cudnn.conv.fp32_precision``
    is "tf32"; before 2.9 ``torch.backends.cudnn.allow_tf32``): torch's default, so facts
    written before this field was read say True."""


def probe_precision(ctx: ProbeContext) -> PrecisionFacts:
    """What the forward hooks saw of autocast and the scaler, with torch's TF32 switches
    (read through :mod:`torchboost._fp32_precision`: never raises, whichever API the script
    set them with)."""
    tf32 = _fp32_precision.tf32_state()
    return PrecisionFacts(autocast=ctx.autocast_dtype is not None, autocast_dtype=ctx.autocast_dtype,
                          grad_scaler=ctx.grad_scaler, tf32_matmul=tf32.matmul, tf32_cudnn=tf32.cudnn)


@dataclass(frozen=True)
class PrecisionTuning:
    """What the tuner's precision levers know of the machine (fp32 math's read it too:
    bf16 and TF32 inside fp32 matmuls need the same instructions and tensor cores)."""

    cpu_bf16: bool = False
    """The CPU has bf16 instructions."""
    cuda_bf16: bool = False
    """The GPU computes in bf16."""
    tf32: bool = False
    """The GPU has TF32 tensor cores."""
    mps_bf16: bool = False
    """Apple's MPS computes in bf16 (macOS 14 and newer)."""
    cpu_bf16_speedup: float | None = None
    """fp32 matmul time / bf16 matmul time as the doctor's probe measured it (None: unknown)."""


def tune_context(facts: Facts) -> PrecisionTuning:
    """What the tuner's precision levers know of the machine, from the doctor's facts: the
    device's bf16 and TF32 support, and the probe's bf16/fp32 matmul speed on a CPU."""
    env = facts.env or {}
    return PrecisionTuning(cpu_bf16=bool(env.get("cpu_bf16", False)), cuda_bf16=bool(env.get("cuda_bf16", False)),
                           tf32=bool(env.get("tf32", False)), mps_bf16=bool(env.get("mps_bf16", False)),
                           cpu_bf16_speedup=getattr(facts, "cpu_bf16_speedup", None))

_CUDA_HALF_FACTOR = 2.0  # tensor cores and half the memory traffic vs plain fp32 (assumed)
_CUDA_HALF_OVER_TF32 = 1.3  # what is left once TF32 already feeds the tensor cores (assumed)
_MPS_BF16_FACTOR = 1.31  # bf16 autocast on Apple's MPS, as public threads report it (assumed)
_CPU_BF16_FACTOR = 1.3  # bf16 matmuls on a CPU with bf16 instructions, when not measured (assumed)
_CPU_BF16_NO_ISA = 0.5  # bf16 emulated without bf16 instructions: about 2x slower (assumed)


def reduced_precision(facts: Facts) -> bool:
    """Reduced precision is already in use: autocast to bf16/fp16, or half parameters."""
    p = facts.seen(PrecisionFacts)
    if p.autocast and dtype_name(p.autocast_dtype) in REDUCED_DTYPES:
        return True
    return bool(facts.model) and any(dtype_name(d) in REDUCED_DTYPES for d in facts.model.param_dtypes)


def _cpu_matmul_factor(speed: float, share: float | None) -> tuple[float, str]:
    # On a CPU only the matmul/conv kernels change speed with bf16; weight the factor by their share.
    if share is None:
        return speed, "all forward+backward time assumed to be matmul/conv"
    return amdahl(share, speed), f"matmul/conv share m = {share:.2f} of profiled op time"


def precision_lower(
    facts: Facts, *, compute_pct: float = 50.0, cpu_bf16_min_speedup: float = 1.05
) -> Finding | None:
    """fp32 forward+backward take at least ``compute_pct`` percent of the step on hardware that
    runs bf16 (or fp16) faster: a CUDA GPU, Apple's MPS with bf16 (macOS 14 and newer), a CPU.
    On a CPU a measured bf16 speedup decides (at least ``cpu_bf16_min_speedup``); without one,
    the CPU must have bf16 instructions."""
    v = view(facts)
    f = v.compute_share
    if reduced_precision(facts) or f * 100 < compute_pct:
        return None
    p, env, notes = facts.seen(PrecisionFacts), facts.env, []
    if v.device == "cuda":
        dtype = "bf16" if env.get("cuda_bf16") else "fp16"
        factor = _CUDA_HALF_OVER_TF32 if p.tf32_matmul else _CUDA_HALF_FACTOR
        basis = f"s = {factor} ({'over TF32' if p.tf32_matmul else 'over fp32'}; assumed)"
    elif v.device == "mps":
        if not env.get("mps_bf16"):
            return None  # MPS before macOS 14: no bf16 to offer
        dtype, factor = "bf16", _MPS_BF16_FACTOR
        basis = f"s = {factor} (bf16 autocast on MPS as public threads report it; assumed, not measured here)"
        notes.append("No peak of MPS is measured here: the estimate is not held against one; torchboost tune "
                     "measures bf16 on this script.")
    elif v.device == "cpu":
        dtype, measured = "bf16", facts.cpu_bf16_speedup
        if measured is not None:
            if measured < cpu_bf16_min_speedup:
                return None
            speed, how = measured, f"measured bf16 matmul speedup {measured:.2f}"
        elif env.get("cpu_bf16"):
            speed, how = _CPU_BF16_FACTOR, f"bf16 matmul speedup {_CPU_BF16_FACTOR} (not measured; assumed)"
            notes.append("The CPU has bf16 instructions but the speedup was not measured: torchboost tune measures it.")
        else:
            return None  # no bf16 instructions and no measurement: bf16 would be slower here
        factor, share_note = _cpu_matmul_factor(speed, matmul_share(facts.profile))
        basis = f"s = {factor:.3f} from {how}, {share_note}"
    else:
        return None
    speedup = amdahl(f, factor)
    notes.append("Reduced precision changes the maths: torchboost tune keeps it only if the loss "
                 "trajectory stays within tolerance of fp32.")
    return Finding(
        id="precision.lower",
        title=f"Forward and backward run in fp32 ({f * 100:.0f}% of the step); use {dtype} autocast",
        evidence={
            "compute_pct": r(f * 100, 1),
            "device": v.device,
            "autocast": "off",
            "tf32_matmul": str(p.tf32_matmul).lower(),
            **({"cpu_bf16_speedup": r(facts.cpu_bf16_speedup)} if facts.cpu_bf16_speedup is not None else {}),
        },
        fix=Overlay.of(PrecisionConfig, mode=dtype),
        expected_speedup=speedup,
        dtype=dtype,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} forward+backward share, {basis}",
        notes=notes,
    )


def precision_slower_on_cpu(facts: Facts, *, cpu_bf16_slow_speedup: float = 1.0) -> Finding | None:
    """bf16/fp16 autocast on a CPU where it is slower than fp32: a measured bf16 speedup below
    ``cpu_bf16_slow_speedup`` decides; without one, a CPU lacking bf16 instructions."""
    v, p = view(facts), facts.seen(PrecisionFacts)
    dtype = dtype_name(p.autocast_dtype)
    if v.device != "cpu" or not p.autocast or dtype not in REDUCED_DTYPES:
        return None
    measured = facts.cpu_bf16_speedup if dtype == "bfloat16" else None
    if measured is not None:
        if measured >= cpu_bf16_slow_speedup:
            return None
        speed, how = measured, f"measured bf16 matmul speedup {measured:.2f}"
    elif facts.env.get("cpu_bf16"):
        return None  # bf16 instructions present and nothing measured: no evidence it is slower
    else:
        speed, how = _CPU_BF16_NO_ISA, f"{dtype} without bf16 instructions ~{_CPU_BF16_NO_ISA} (assumed)"
    f = v.compute_share
    # Returning to fp32 turns each reduced-precision ms into ``speed`` ms of fp32 on the matmul share.
    share = matmul_share(facts.profile)
    m = 1.0 if share is None else share
    new = 1.0 - f + f * ((1.0 - m) + m * speed)
    if f <= 0 or new <= 0 or new >= 1.0:
        return None
    speedup = 1.0 / new
    notes = ["Measure, don't assume: torchboost tune times both precisions on your model."]
    if p.grad_scaler:
        notes.append("The GradScaler only matters for fp16; drop it with the autocast.")
    return Finding(
        id="precision.slower_on_cpu",
        title=f"{dtype} autocast is slower than fp32 on this CPU; train in fp32",
        evidence={
            "autocast_dtype": dtype,
            "cpu_bf16_instructions": str(bool(facts.env.get("cpu_bf16"))).lower(),
            "compute_pct": r(f * 100, 1),
            **({"cpu_bf16_speedup": r(measured)} if measured is not None else {}),
        },
        fix=Overlay.of(PrecisionConfig, mode="fp32"),
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f ((1 - m) + m s)) = {speedup:.3f}; f = {f:.3f} forward+backward share, "
                f"m = {m:.2f} matmul/conv share, s = {speed:.2f} from {how}",
        notes=notes,
    )
