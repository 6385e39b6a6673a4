"""Optimizer implementation: the technique's descriptor.

Its parts: ``optimizer_settings`` (the section), ``optimizer_impl`` (resolving and
rebuilding with the foreach or fused kernels), ``optimizer_diagnosis`` (the finding and
the doctor's quick switch).
"""

from __future__ import annotations

from typing import Any

import torch

from torchboost.config import Overlay
from torchboost.techniques.optimizer.optimizer_diagnosis import optimizer_fused, quick_switch
from torchboost.techniques.optimizer.optimizer_impl import (
    FOREACH_OPTIMIZERS, FUSED_DEVICES, IMPLEMENTATIONS, apply_optimizer_implementation, current_implementation,
    fused_kernel_on, resolve_optimizer, switch_implementation_in_place,
)
from torchboost.techniques.optimizer.optimizer_settings import OptimizerConfig
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ResolveContext, Resolution, Rule, Technique, TuneContext,
)

__all__ = [
    "OptimizerConfig",
    "FOREACH_OPTIMIZERS",
    "FUSED_DEVICES",
    "IMPLEMENTATIONS",
    "apply_optimizer_implementation",
    "switch_implementation_in_place",
    "current_implementation",
    "fused_kernel_on",
    "resolve_optimizer",
    "optimizer_fused",
    "quick_switch",
]


def _resolve(ctx: ResolveContext) -> Resolution:
    if ctx.optimizer is None:
        implementation, reason = "default", "no optimizer given"
    else:
        implementation, reason = resolve_optimizer(ctx.config.optimizer.implementation, ctx.optimizer,
                                                   device=ctx.device)
    return Resolution(Overlay.of(OptimizerConfig, implementation=implementation),
                      {"optimizer.implementation": reason})


def _apply(prep: Preparation) -> None:
    # Last: fused kernels need the parameters on their device. The Booster's step
    # (torchboost.step) then drives the optimizer left in prep.optimizer.
    if prep.optimizer is None:
        return
    inner = apply_optimizer_implementation(prep.optimizer, prep.config.optimizer.implementation)
    if prep.scheduler is not None and inner is not prep.optimizer:
        prep.scheduler.optimizer = inner  # the schedule must drive the rebuilt optimizer
    prep.optimizer = inner


def _nocode_first_step(values: dict[str, Any], optimizer: torch.optim.Optimizer, notes: list[str]) -> None:
    implementation = values.get("implementation", "default")
    if implementation in ("default", "auto"):
        return
    try:
        switched = switch_implementation_in_place(optimizer, implementation)
    except ValueError as exc:  # this optimizer has no such kernel: leave it as the script built it
        notes.append(f"{type(optimizer).__name__} kept as built: {exc}")
        return
    if switched:
        notes.append(f"{type(optimizer).__name__} switched to {implementation}")


def _propose(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    if not ctx.has_optimizer:
        return []
    return [Overlay.of(OptimizerConfig, implementation="fused"), Overlay.of(OptimizerConfig, implementation="foreach")]


def _fused_alone(change: Overlay) -> bool:
    # The fused kernel is the quick switch's (group flags read at every step); foreach has none.
    return change == Overlay.of(OptimizerConfig, implementation="fused")


def _spell(section: OptimizerConfig) -> FrameworkSpelling:
    if section.implementation not in ("fused", "foreach"):
        return FrameworkSpelling()
    code = (f"optimizer = torch.optim.AdamW(model.parameters(), ..., {section.implementation}=True)"
            "  # Adam, SGD, ... take it too",)
    # The Trainer builds AdamW itself; its fused kernel has a name of its own.
    transformers = {"optim": "adamw_torch_fused"} if section.implementation == "fused" else {}
    return FrameworkSpelling(transformers=transformers, code=code)


TECHNIQUE = Technique(
    name="optimizer",
    title="optimizer implementation",
    after=('accumulation',),
    placed="last: the optimizer is rebuilt for the final parameters, and its step wraps precision's scaler and accumulation's window",
    section=OptimizerConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(at_first_step=_nocode_first_step),
    levers=(Lever("optimizer", "fused/foreach optimizer", Parity.EXACT, _propose, ("optimizer.fused",),
                  priority=60, switchable=_fused_alone),),
    spell=_spell,
    rules=(Rule("optimizer.fused", optimizer_fused),),
    quick_probe=quick_switch,
)
