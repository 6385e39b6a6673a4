"""Memory layout: channels_last for models with 2-D convolutions, and for their inputs.

Convolution kernels on CUDA tensor cores (fp16/bf16) want NHWC ("channels_last")
tensors; in NCHW they pay for layout conversions around every convolution. In fp32, or
on CPU, the gain is small or negative, so ``auto`` turns it on only for CUDA with reduced
precision; an explicit ``true`` is honoured anywhere. The maths is unchanged: only the
order of elements in memory differs.

The Booster converts the model and each batch its loader yields. From outside (``torchboost
run``, tune's trials) only the model is converted: a convolution whose weight is
channels_last computes in channels_last whatever its input's layout (cuDNN's and oneDNN's
choice follows the weight too), so an NCHW batch is converted once, by the first
convolution, on the device, and every layer after it gets channels_last tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from torchboost.config import AUTO, BoolOrWord, Overlay, check_bool_or_word
from torchboost.techniques._model import has_conv2d
from torchboost.techniques._tensors import map_tensors
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import amdahl, cuda_conv_compute_share, dtype_name, r
from torchboost.techniques.precision import PrecisionConfig, PrecisionFacts, reduced_precision
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ProbeContext, ResolveContext, Resolution, Rule, Technique,
    TuneContext,
)

__all__ = ["MemoryConfig", "MemoryTuning", "apply_channels_last", "has_conv2d", "resolve_channels_last",
           "to_channels_last"]


@dataclass(frozen=True, kw_only=True)
class MemoryConfig:
    """Memory layout."""

    section: ClassVar[str] = "memory"

    channels_last: BoolOrWord = AUTO
    """auto (on only for 4-D convolutions on CUDA with reduced precision) | true | false."""

    def __post_init__(self) -> None:
        check_bool_or_word("memory.channels_last", self.channels_last, (AUTO,))

    @classmethod
    def off(cls) -> "MemoryConfig":
        """The model's own layout: plain PyTorch."""
        return cls(channels_last=False)

REDUCED_PRECISION_MODES = ("bf16", "fp16")
"""Precision modes in which ``auto`` turns channels_last on (CUDA only)."""

def resolve_channels_last(
    requested: bool | str, model: nn.Module, *, device: torch.device, precision_mode: str
) -> tuple[bool, str]:
    """Resolve ``memory.channels_last`` (True, False or "auto") to a bool and the reason.

    ``precision_mode`` is the resolved precision ("fp32", "tf32", "bf16" or "fp16").
    """
    device_type = torch.device(device).type
    conv = has_conv2d(model)
    if requested is True:
        return True, "set in config" + ("" if conv else " (the model has no 2-D convolution: no effect)")
    if requested is False:
        return False, "set in config"
    if requested != "auto":
        raise ValueError(f'memory.channels_last: expected auto | true | false; got "{requested}"')
    if not conv:
        return False, "the model has no 2-D convolution"
    if device_type != "cuda":
        return False, f"on {device_type} channels_last gains little or loses; set true to try it"
    if precision_mode not in REDUCED_PRECISION_MODES:
        return False, f"{precision_mode} convolutions gain little from channels_last; it pays with bf16/fp16"
    return True, f"2-D convolutions on CUDA in {precision_mode}: tensor-core kernels want channels_last"


def apply_channels_last(model: nn.Module) -> nn.Module:
    """Convert the model's 4-D parameters and buffers to channels_last, in place; returns ``model``."""
    return model.to(memory_format=torch.channels_last)


def _to_channels_last(t: torch.Tensor) -> torch.Tensor:
    if t.dim() == 4 and t.is_floating_point():
        return t.contiguous(memory_format=torch.channels_last)
    return t


def to_channels_last(batch: Any) -> Any:
    """``batch`` with every 4-D floating-point tensor in channels_last; others unchanged.

    Walks the same structures as :func:`torchboost.techniques.loader.map_tensors`.
    Labels and integer masks are left alone.
    """
    return map_tensors(batch, _to_channels_last)


# -- the descriptor ---------------------------------------------------------------------

def _resolve(ctx: ResolveContext) -> Resolution:
    chosen, reason = resolve_channels_last(ctx.config.section(MemoryConfig).channels_last, ctx.model, device=ctx.device,
                                           precision_mode=ctx.config.section(PrecisionConfig).mode)
    return Resolution(Overlay.of(MemoryConfig, channels_last=chosen), {"memory.channels_last": reason})


def _apply(prep: Preparation) -> None:
    # Before compile (Inductor specialises on the layout) and before the optimizer is
    # rebuilt; the inputs follow, converted as the prepared loader yields them.
    if prep.config.section(MemoryConfig).channels_last:
        apply_channels_last(prep.model)
        prep.batch_transforms.append(to_channels_last)


def _nocode_root(values: dict[str, Any], module: nn.Module, notes: list[str]) -> None:
    # After the root's first forward, before its first optimizer step: the parameters are
    # converted in place (the optimizer holds the same objects, its state still empty).
    if values.get("channels_last") is True:
        apply_channels_last(module)
        notes.append(f"channels_last on {type(module).__name__}'s weights (its first convolution converts "
                     "the NCHW inputs)")


def _propose(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    # Through the Booster or from outside, and on any device: tune measures it (on a 2-core
    # CPU the vision workload's tune kept it at 1.06x, benchmarks/RESULTS.md).
    if ctx.seen(MemoryFacts).channels_last:  # the script converted the model itself
        return []
    return [Overlay.of(MemoryConfig, channels_last=True)] if ctx.own(MemoryTuning).has_conv2d else []


@dataclass(frozen=True)
class MemoryTuning:
    """What the memory format's lever knows of the script (cudnn's autotuner lever reads it
    too: both act on 2-D convolutions)."""

    has_conv2d: bool = True
    """The model has 2-D convolutions (their memory format and algorithm choice can matter)."""


def _tune_context(facts: Facts) -> MemoryTuning:
    return MemoryTuning(has_conv2d=bool(facts.model and facts.model.has_conv2d))


def _spell(section: MemoryConfig) -> FrameworkSpelling:
    if section.channels_last is not True:
        return FrameworkSpelling()
    return FrameworkSpelling(code=("model = model.to(memory_format=torch.channels_last)",
                                   "x = x.contiguous(memory_format=torch.channels_last)  # each input batch"))


# -- its facts and diagnosis ----------------------------------------------------------------

@dataclass(frozen=True)
class MemoryFacts:
    """The model's memory format as the script built it."""

    technique: ClassVar[str] = "memory"

    channels_last: bool = False
    """The conv weights are already in channels_last memory format."""


def _probe(ctx: ProbeContext) -> MemoryFacts:
    if ctx.model is None:
        return MemoryFacts()
    weights = [m.weight for m in ctx.model.modules() if isinstance(m, nn.Conv2d)]
    layout = [w.is_contiguous(memory_format=torch.channels_last) for w in weights]
    # 1x1 weights are contiguous in both formats: only a weight that is not NCHW is evidence.
    return MemoryFacts(channels_last=bool(weights) and all(layout) and any(not w.is_contiguous() for w in weights))


_CHANNELS_LAST_FACTOR = 1.2  # NHWC convs in reduced precision skip layout transposes (assumed)


def memory_channels_last(facts: Facts, *, compute_pct: float = 50.0) -> Finding | None:
    """A conv net on CUDA in reduced precision with NCHW weights: tensor-core conv kernels want
    NHWC (channels_last) and otherwise transpose. Fires at ``compute_pct`` percent forward+backward."""
    f = cuda_conv_compute_share(facts, compute_pct)
    if f is None or facts.seen(MemoryFacts).channels_last or not reduced_precision(facts):
        return None
    speedup = amdahl(f, _CHANNELS_LAST_FACTOR)
    return Finding(
        id="memory.channels_last",
        title="Convolutions in reduced precision run on NCHW tensors; use channels_last",
        evidence={"compute_pct": r(f * 100, 1), "has_conv2d": "true", "channels_last": "false",
                  "autocast_dtype": dtype_name(facts.seen(PrecisionFacts).autocast_dtype) or "none"},
        fix=Overlay.of(MemoryConfig, channels_last=True),
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} forward+backward share, "
                f"s = {_CHANNELS_LAST_FACTOR} (assumed)",
        notes=["Only 4-D inputs change layout; check the gain, some layers prefer NCHW."],
    )


TECHNIQUE = Technique(
    name="memory",
    title="channels_last memory format",
    after=('precision',),
    placed="channels_last converts the model's weights before anything traces or wraps them",
    section=MemoryConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(wants_root=lambda values: values.get("channels_last") is True, at_root=_nocode_root),
    levers=(Lever("channels_last", "channels_last memory format", Parity.EXACT, _propose, ("memory.channels_last",),
                  priority=90),),
    spell=_spell,
    facts=MemoryFacts,
    probe=_probe,
    tune_context=_tune_context,
    rules=(Rule("memory.channels_last", memory_channels_last),),
)
