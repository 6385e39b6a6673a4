"""A quick probe's switch: one in-process change the doctor turns on and off between steps.

A technique whose finding is a switch that needs no recompile (bf16 autocast, bf16/TF32
math in fp32 matmuls, the fused optimizer) declares ``quick_probe`` on its
:class:`~torchboost.techniques.registry.Technique`: given the live objects (a
:class:`~torchboost.techniques.registry.ProbeContext`) it returns a :class:`QuickSwitch`,
or None where the switch cannot apply (already on, no such kernel, a compiled model). The
doctor's runner (:mod:`torchboost.observe.probes.quick`) times a few steps with it on
against plain steps, interleaved, and turns it off again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from torch import nn

__all__ = ["QuickSwitch", "swap_forward"]


@dataclass(frozen=True)
class QuickSwitch:
    """How to turn one technique's change on and off in the live process, between two steps."""

    finding_id: str
    """The finding whose fix this switch is (its measured ratio goes there)."""
    label: str
    """What is switched, in words ("bf16 autocast")."""
    on: Callable[[], None]
    """Turn it on (for the next step)."""
    off: Callable[[], None]
    """Turn it off: the script's own state exactly as before ``on``."""
    errors: list[str] = field(default_factory=list)
    """What went wrong with it on and was caught (a forward that fell back), in words: the
    runner then reports the probe as failed instead of a ratio."""
    setting: Mapping[str, Any] = field(default_factory=dict)
    """The same change in torchboost.toml's dotted names (``{"precision.mode": "bf16"}``):
    a tuning trial alternates a candidate in bursts only with the switch that makes exactly
    it (:mod:`torchboost.observe.probes.quick`); empty: none."""


def swap_forward(module: nn.Module, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Callable[[], None]:
    """Replace ``module.forward`` on the instance with ``make(current forward)``; returns the
    function that puts back exactly what was there (an instance attribute, or none)."""
    had = "forward" in module.__dict__
    before = module.__dict__.get("forward")
    module.forward = make(module.forward)

    def restore() -> None:
        if had:
            module.forward = before
        else:
            module.__dict__.pop("forward", None)

    return restore
