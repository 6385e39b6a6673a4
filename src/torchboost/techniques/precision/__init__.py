"""Mixed precision: the ``[precision]`` section, how ``"auto"`` picks a mode, the descriptor.

Four concrete modes, each a small policy object in
:mod:`~torchboost.techniques.precision.precision_policy`:

* ``fp32``: plain PyTorch; touches nothing.
* ``tf32``: fp32 tensors, but CUDA matmuls and convolutions use TF32 tensor cores
  (``torch.backends.cuda.matmul.fp32_precision = "tf32"`` and cuDNN's likewise; the
  ``allow_tf32`` flags on a torch before 2.9).
* ``bf16``: autocast to bfloat16. bf16 has fp32's exponent range, so it never needs a
  loss scaler and never owns one.
* ``fp16``: autocast to float16 plus a :class:`torch.amp.GradScaler`; a step whose
  gradients hold inf/NaN is skipped and the scale is halved.

``"auto"`` is resolved by :func:`resolve_precision` from an :class:`~torchboost.env.Environment`:

* CUDA with bf16 (every Ampere and newer GPU): ``bf16``. TF32 is *not* switched on as
  well: TF32 only changes matmuls and convolutions, and inside a bf16 autocast region
  those already run in bf16; what stays fp32 there (norms, reductions, losses) is
  untouched by TF32. So ``auto`` never picks ``tf32``; it is there for users who want
  fp32 maths at tensor-core speed and ask for it.
* CUDA without bf16, with tensor cores (compute capability 7.x): ``fp16`` with a scaler.
* Older CUDA GPUs (no tensor cores, slow fp16 on many of them): ``fp32``.
* CPU: ``fp32`` unless the CPU has bf16 instructions *and* a measured bf16 matmul is at
  least :data:`CPU_BF16_MIN_SPEEDUP` times faster than fp32; the reason gives the number.
* Apple's MPS with bf16 (macOS 14 and newer, a bf16 op tried on 'mps'): ``bf16``, as on
  CUDA; its gain there is not measured by the probe, tune measures it. MPS without bf16:
  ``fp32`` (fp16 only when asked for).
* Other devices: ``fp32``; reduced precision there is only used when asked for.

Every mode is usable on its own, without the Booster::

    precision = make_precision("fp16", "cpu")
    precision.setup()
    with precision.autocast():
        loss = criterion(model(x), y)
    precision.backward(loss)
    precision.unscale_(optimizer)            # before clipping
    if precision.step(optimizer):            # False: skipped for inf/NaN gradients
        scheduler.step()
    optimizer.zero_grad()
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from torchboost import env as _envmod
from torchboost.config import AUTO, ConfigError, Overlay, check_choice
from torchboost.techniques.precision.precision_policy import (
    AutocastPrecision, Fp16Precision, Precision, Tf32Precision, make_precision,
)
from torchboost.techniques.precision.precision_diagnosis import (PrecisionFacts, PrecisionTuning, precision_lower,
                                                                 precision_slower_on_cpu,
                                                                 probe_precision, reduced_precision, tune_context)
from torchboost.techniques.precision.precision_settings import PrecisionConfig
from torchboost.techniques._quick import swap_forward
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ProbeContext, QuickSwitch, ResolveContext, Resolution, Rule,
    Technique, TuneContext,
)

__all__ = [
    "CPU_BF16_MIN_SPEEDUP",
    "autocast_dtype",
    "AutocastPrecision",
    "Fp16Precision",
    "Precision",
    "PrecisionConfig",
    "PrecisionTuning",
    "SlowPrecisionWarning",
    "Tf32Precision",
    "make_precision",
    "quick_switch",
    "resolve_precision",
]

CPU_BF16_MIN_SPEEDUP = 1.2
"""bf16/fp32 matmul speed ratio (fp32 time / bf16 time, unitless) a CPU must reach for
``auto`` to pick bf16. Below it the rounding cost of bf16 buys too little."""


_FP16_MIN_CAPABILITY = (7, 0)  # first GPUs with fp16 tensor cores (Volta)

# Warnings already given in this process, so each is said once however many times
# the configuration is resolved (the tuner and the Booster may both resolve it).
_warned: set[str] = set()


class SlowPrecisionWarning(UserWarning):
    """The requested precision runs here but is likely slower than fp32."""


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, SlowPrecisionWarning, stacklevel=3)


def _resolve_explicit(mode: str, env: _envmod.Environment) -> tuple[str, str]:
    if mode == "tf32" and not env.tf32:
        where = env.device
        if env.compute_capability:
            where += f" (compute capability {env.compute_capability})"
        raise ConfigError(
            'precision.mode "tf32" needs a CUDA GPU of compute capability 8.0 (Ampere) or '
            f'newer; this machine runs on {where}. Use "fp32", or "auto".'
        )
    if mode == "bf16" and env.device == "cuda" and not env.cuda_bf16:
        raise ConfigError(
            f'precision.mode "bf16" is not supported by {env.gpu_name or "this GPU"}; '
            'use "fp16" (with loss scaling) or "auto".'
        )
    if mode == "bf16" and env.device == "mps" and not env.mps_bf16:
        raise ConfigError(
            'precision.mode "bf16" is not supported by Apple\'s MPS here (bf16 needs macOS 14 or newer); '
            'use "fp16" or "auto".'
        )
    if mode == "bf16" and env.device == "cpu" and not env.cpu_bf16:
        _warn_once(
            "bf16-cpu",
            'precision "bf16" on a CPU without bf16 instructions (avx512_bf16/amx_bf16): '
            'it runs, emulated, and is likely slower than fp32; use "auto" to measure.',
        )
        return mode, "requested; the CPU has no bf16 instructions, so bf16 is emulated"
    return mode, "requested"


def _resolve_cuda(env: _envmod.Environment) -> tuple[str, str]:
    gpu = f"{env.gpu_name or 'CUDA GPU'} (compute capability {env.compute_capability})"
    if env.cuda_bf16:
        return "bf16", f"{gpu} supports bf16: autocast bf16, no loss scaling needed"
    if (env.compute_capability or (0, 0)) >= _FP16_MIN_CAPABILITY:
        return "fp16", f"{gpu} has fp16 tensor cores but no bf16: autocast fp16 with a GradScaler"
    return "fp32", f"{gpu} has no tensor cores, so reduced precision would gain little"


def _resolve_mps(env: _envmod.Environment) -> tuple[str, str]:
    if env.mps_bf16:
        return "bf16", ("Apple's MPS supports bf16 (macOS 14 or newer, a bf16 op ran): autocast bf16, no loss "
                        "scaling needed; its gain here is not measured, tune measures it")
    return "fp32", "Apple's MPS here has no bf16 (it needs macOS 14 or newer): fp32; ask for fp16 to try it"


def _resolve_cpu(env: _envmod.Environment) -> tuple[str, str]:
    if not env.cpu_bf16:
        return "fp32", "the CPU has no bf16 instructions (avx512_bf16/amx_bf16): bf16 is slower"
    speedup = _envmod.measure_cpu_bf16_speedup()
    measured = f"a bf16 matmul measured {speedup:.2f}x the speed of fp32"
    if speedup >= CPU_BF16_MIN_SPEEDUP:
        return "bf16", f"the CPU has bf16 instructions and {measured} (>= {CPU_BF16_MIN_SPEEDUP}x)"
    return "fp32", f"the CPU has bf16 instructions but {measured} (< {CPU_BF16_MIN_SPEEDUP}x)"


def resolve_precision(requested: str, env: _envmod.Environment) -> tuple[str, str]:
    """Turn a configured mode into a concrete one for ``env``; returns ``(mode, reason)``.

    ``requested`` is one of :data:`PrecisionConfig.MODES`. An explicit mode is kept
    (bf16 on a CPU without bf16 instructions warns once per process that it is likely
    slower); ``"auto"`` follows the rules in this module's docstring. On a bf16-capable
    CPU, ``"auto"`` runs a ~0.1 s matmul measurement once per process.
    """
    if requested not in PrecisionConfig.MODES:
        raise ConfigError(
            f"precision.mode: expected one of {', '.join(PrecisionConfig.MODES)}; got {requested!r}"
        )
    if requested != "auto":
        return _resolve_explicit(requested, env)
    if env.device == "cuda":
        return _resolve_cuda(env)
    if env.device == "cpu":
        return _resolve_cpu(env)
    if env.device == "mps":
        return _resolve_mps(env)
    return "fp32", f"auto keeps fp32 on {env.device}; ask for fp16 or bf16 to try them"


# -- the descriptor ---------------------------------------------------------------------

def _resolve(ctx: ResolveContext) -> Resolution:
    mode, reason = resolve_precision(ctx.config.precision.mode, ctx.env)
    return Resolution(Overlay.of(PrecisionConfig, mode=mode), {"precision.mode": reason})


def _apply(prep: Preparation) -> None:
    # A process-wide switch (TF32) or an autocast policy; set before the model is touched,
    # so everything after runs under it.
    prep.precision = make_precision(prep.config.precision.mode, prep.device.type)
    prep.precision.setup()


def _to_fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.dtype != torch.float32 else value
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_to_fp32(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_fp32(v) for k, v in value.items()}
    return value


def _nocode_refuse(values: dict[str, Any]) -> str | None:
    return "fp16 needs a gradient scaler in the loop" if values.get("mode") == "fp16" else None


def _nocode_start(values: dict[str, Any], notes: list[str]) -> None:
    if values.get("mode") == "tf32":
        Tf32Precision("cuda").setup()
        notes.append("TF32 matmuls on")


def _autocast_forward(inner: Any, device_type: str, dtype: torch.dtype, errors: list[str] | None = None) -> Any:
    """``inner`` run under autocast, its floating outputs back in fp32 for the loss, as they
    would leave an autocast block written around the forward and the loss. ``errors``: a
    forward that raises under autocast is run again without it, and the error kept there."""

    @functools.wraps(inner)
    def forward(*args: Any, **kwargs: Any) -> Any:
        try:
            with torch.autocast(device_type, dtype=dtype):
                out = inner(*args, **kwargs)
        except Exception as exc:
            if errors is None:
                raise
            errors.append(f"{type(exc).__name__}: {exc}")
            return inner(*args, **kwargs)
        return _to_fp32(out)

    return forward


def _nocode_root(values: dict[str, Any], module: nn.Module, notes: list[str]) -> None:
    # From outside there is no autocast block in the loop: the root module's forward runs
    # under autocast.
    if values.get("mode") != "bf16":
        return
    device_type = next((p.device.type for p in module.parameters()), "cpu")
    module.forward = _autocast_forward(module.forward, device_type, torch.bfloat16)
    notes.append(f"bf16 autocast around {type(module).__name__}.forward")


def quick_switch(ctx: ProbeContext) -> QuickSwitch | None:
    """bf16 autocast (fp16 on a GPU without bf16) around the root module's forward, as a
    switch the doctor turns on for a step and off again (the instance's forward put back);
    None where the script's own autocast is on, the model is compiled (autocast would
    recompile it) or the device has no reduced-precision autocast (MPS without bf16)."""
    model = ctx.model
    if model is None or ctx.autocast_dtype is not None or hasattr(model, "_orig_mod"):
        return None
    if ctx.device == "cuda":
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    elif ctx.device == "cpu" or (ctx.device == "mps" and _envmod.probe().mps_bf16):
        dtype = torch.bfloat16
    else:
        return None
    errors: list[str] = []
    restore: list[Any] = []
    name = "bf16" if dtype == torch.bfloat16 else "fp16"

    def on() -> None:
        restore.append(swap_forward(model, lambda inner: _autocast_forward(inner, ctx.device, dtype, errors)))

    def off() -> None:
        while restore:
            restore.pop()()

    return QuickSwitch("precision.lower", f"{name} autocast", on=on, off=off, errors=errors,
                       setting=Overlay.of(PrecisionConfig, mode=name).to_dict())


def _propose_precision(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    if ctx.device == "cuda":
        if ctx.own(PrecisionTuning).cuda_bf16:
            return [Overlay.of(PrecisionConfig, mode="bf16")]
        return [Overlay.of(PrecisionConfig, mode="fp16")] if ctx.uses_booster else []
    if ctx.device == "mps":
        return [Overlay.of(PrecisionConfig, mode="bf16")] if ctx.own(PrecisionTuning).mps_bf16 else []
    # On a CPU bf16 is tried even without bf16 instructions: the measurement, not the
    # flag, decides, and the report then says how much slower it was.
    return [Overlay.of(PrecisionConfig, mode="bf16")]


HOPELESS_CPU_BF16_SPEEDUP = 0.5
"""A CPU whose bf16 matmul the probe measured below this fraction of fp32's speed is not
worth a bf16 trial: nothing around the matmuls can make up for it."""


def _hopeless(ctx: TuneContext) -> str | None:
    speedup = ctx.own(PrecisionTuning).cpu_bf16_speedup
    if ctx.device == "cpu" and speedup is not None and speedup < HOPELESS_CPU_BF16_SPEEDUP:
        return (f"the bf16 matmul probe ran at {speedup:.2f}x fp32's speed on this CPU "
                f"(< {HOPELESS_CPU_BF16_SPEEDUP}x): bf16 cannot be faster here")
    return None


def autocast_dtype(settings: Overlay) -> str | None:
    """The dtype autocast computes in under ``settings`` ("bf16", "fp16"); None: no autocast."""
    mode = settings.section(PrecisionConfig).get("mode")
    return mode if mode in ("bf16", "fp16") else None


def _subject(change: Overlay) -> str:
    return str(change.value(PrecisionConfig, "mode"))


_LIGHTNING = {"fp32": "32-true", "tf32": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
_ACCELERATE = {"fp32": "no", "tf32": "no", "bf16": "bf16", "fp16": "fp16"}


_TRANSFORMERS = {"fp32": {"bf16": False, "fp16": False}, "tf32": {"tf32": True}, "bf16": {"bf16": True},
                 "fp16": {"fp16": True}}
_FORWARD = "    loss = criterion(model(x), y)"
_TORCH = {
    "fp32": ("with torch.autocast(device.type, enabled=False):  # fp32, no autocast", _FORWARD),
    "tf32": ('torch.set_float32_matmul_precision("high")',),
    "bf16": ("with torch.autocast(device.type, dtype=torch.bfloat16):", _FORWARD),
    "fp16": ("with torch.autocast(device.type, dtype=torch.float16):", _FORWARD,
             "scaler = torch.amp.GradScaler(device.type)  # fp16 needs loss scaling",
             "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()"),
}


def _spell(section: PrecisionConfig) -> FrameworkSpelling:
    return FrameworkSpelling(lightning={"precision": _LIGHTNING.get(section.mode)},
                             accelerate={"mixed_precision": _ACCELERATE.get(section.mode)},
                             transformers=_TRANSFORMERS.get(section.mode, {}), code=_TORCH.get(section.mode, ()))


TECHNIQUE = Technique(
    name="precision",
    title="mixed precision",
    after=('cudnn',),
    placed='the last process-wide switch (TF32) and the precision object the step uses; channels_last\'s "auto" reads the precision resolved here',
    section=PrecisionConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(refuse=_nocode_refuse, at_start=_nocode_start, wants_root=lambda v: v.get("mode") == "bf16",
                  at_root=_nocode_root),
    levers=(
        Lever("precision", "lower precision (autocast)", Parity.REDUCED, _propose_precision,
              ("precision.lower", "precision.slower_on_cpu"), priority=30, subject=_subject, hopeless=_hopeless,
              probed_by="precision.lower", retry_after=("compile",)),
        # TF32 is tuned as fp32_math's "tf32" lever: its finding and quick switch are there.
    ),
    spell=_spell,
    facts=PrecisionFacts,
    probe=probe_precision,
    tune_context=tune_context,
    rules=(Rule("precision.lower", precision_lower), Rule("precision.slower_on_cpu", precision_slower_on_cpu)),
    quick_probe=quick_switch,
)
