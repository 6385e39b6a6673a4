"""The optimizer's diagnosis: the fused-kernel finding and its quick switch."""

from __future__ import annotations

from typing import Any

import torch

from torchboost.config import Overlay
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import amdahl, measured_faster, r, view
from torchboost.techniques.optimizer.optimizer_impl import _blocker, _flags, current_implementation, fused_kernel_on
from torchboost.techniques.optimizer.optimizer_settings import OptimizerConfig
from torchboost.techniques.registry import ProbeContext, QuickSwitch

__all__ = ["optimizer_fused", "quick_switch"]

_FUSED_OVER_FOREACH = 1.5  # fused optimizer vs the foreach one (assumed)
_FUSED_OVER_LOOP = 3.0  # fused optimizer vs the per-parameter loop (assumed)


def optimizer_fused(facts: Facts, *, optimizer_pct: float = 5.0) -> Finding | None:
    """The optimizer step takes at least ``optimizer_pct`` percent of the step (or the doctor's
    quick switch measured the fused step faster in every pair) and the optimizer supports
    ``fused=True`` on this device but does not use it."""
    opt, v = facts.optimizer, view(facts)
    if opt is None or not opt.supports_fused or opt.fused:
        return None
    if v.share["optimizer"] * 100 < optimizer_pct and not measured_faster(facts, "optimizer.fused"):
        return None
    # foreach=None means the default: foreach on CUDA, the per-parameter loop on CPU.
    foreach = opt.foreach if opt.foreach is not None else v.device == "cuda"
    factor = _FUSED_OVER_FOREACH if foreach else _FUSED_OVER_LOOP
    f = v.share["optimizer"]
    speedup = amdahl(f, factor)
    name = opt.class_name or "AdamW"
    return Finding(
        id="optimizer.fused",
        title=f"{name} steps {'with foreach kernels' if foreach else 'parameter by parameter'} "
              f"({f * 100:.0f}% of the step); use the fused implementation",
        evidence={
            "optimizer_pct": r(f * 100, 1),
            "optimizer_ms_per_step": r(v.ms["optimizer"]),
            "optimizer": name,
            "implementation": "foreach" if foreach else "for-loop",
        },
        fix=Overlay.of(OptimizerConfig, implementation="fused"),
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} optimizer share, "
                f"s = {factor} fused over {'foreach' if foreach else 'for-loop'} (assumed)",
        notes=["Same update maths; fused kernels round slightly differently at the last bit."],
    )


def _place_steps(optimizer: torch.optim.Optimizer, groups: list[dict[str, Any]], *, on_device: bool) -> None:
    """Move each parameter's ``state["step"]`` tensor where the implementation about to step
    needs it: beside its parameter (``on_device``: the fused kernel reads it there, as a
    float32 tensor), or on the CPU, where torch's for-loop and foreach Adam keep it when
    neither ``capturable`` nor ``fused`` is set. Steps that are already there stay put; the
    ones that come back from a device do so in one copy (one wait for the device)."""
    moving: list[tuple[dict[str, Any], torch.Tensor]] = []
    for group in groups:
        if not on_device and group.get("capturable"):
            continue  # a capturable optimizer keeps its steps on the device itself
        for param in group["params"]:
            state = optimizer.state.get(param)
            step = state.get("step") if state else None
            if not isinstance(step, torch.Tensor):
                continue
            if on_device and (step.device != param.device or step.dtype != torch.float32):
                state["step"] = step.to(device=param.device, dtype=torch.float32)
            elif not on_device and step.device.type != "cpu":
                moving.append((state, step))
    if moving:
        # One stacked copy: a tensor per parameter would wait for the device once each.
        for (state, _), value in zip(moving, torch.stack([s.float() for _, s in moving]).cpu().unbind()):
            state["step"] = value.clone()


def quick_switch(ctx: ProbeContext) -> QuickSwitch | None:
    """The script's optimizer stepping with its fused kernel, as a switch the doctor turns on
    for a step and off again: each group's ``foreach``/``fused`` flags are set, then put back
    as they were (torch reads them at every step). The state carries over both ways but one
    tensor: Adam's and Adagrad's ``step``, which their for-loop and foreach kernels keep on the
    CPU and the fused kernel needs beside the parameters (on a GPU, a fused step on a CPU
    ``step`` fails inside the script's ``optimizer.step()``): ``on`` moves it there, ``off``
    back. None where it has no fused kernel here or already uses it."""
    optimizer = ctx.optimizer
    if optimizer is None or current_implementation(optimizer) == "fused":
        return None
    devices = {p.device.type for g in optimizer.param_groups for p in g["params"]}
    if not devices or not all(fused_kernel_on(type(optimizer), d) for d in devices) or _blocker(optimizer):
        return None
    flags = _flags(optimizer, "fused")
    groups = [*optimizer.param_groups]
    saved = [{k: g[k] for k in flags if k in g} for g in groups]

    def on() -> None:
        _place_steps(optimizer, groups, on_device=True)
        for group in groups:
            group.update(flags)

    def off() -> None:
        for group, before in zip(groups, saved):
            for key in flags:
                group.pop(key, None)
            group.update(before)
        _place_steps(optimizer, groups, on_device=False)

    return QuickSwitch("optimizer.fused", f"fused {type(optimizer).__name__}", on=on, off=off,
                       setting=Overlay.of(OptimizerConfig, implementation="fused").to_dict())
