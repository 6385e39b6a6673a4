"""Each hot operator against its roof: the roofline of one observed step.

For an operator of the profiler window (its time per step) with the FLOPs and bytes the
counted step gave it (:mod:`torchboost.observe.flop_count`, :mod:`torchboost.observe.byte_count`):

    intensity = FLOPs / bytes                        (FLOP per byte moved)
    roof      = min(peak, intensity x bandwidth)     (FLOP/s the machine allows at that intensity)
    achieved  = FLOPs / time,  share = achieved / roof

``peak`` is the probe's matmul peak for the op's dtype (the step's; on a GPU an fp32 step's
convolutions run in TF32 where cuDNN allows it, its matmuls where cuBLAS does) and
``bandwidth`` its triad bandwidth (:mod:`torchboost.limits`). The op is memory-bound when ``intensity x bandwidth``
is below the peak (the ridge point is ``peak / bandwidth``), else compute-bound. An op that
carries no FLOPs (elementwise, norms, copies) has no place on the FLOP roofline; its bytes
per second against the bandwidth is its share. The bytes are what the op must read and
write at least once, so an op served from the caches can exceed the bandwidth roof: the
share is then over 100%, and says the op's data fits in the caches.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from torchboost.evidence.observed import Facts

__all__ = ["OpRoof", "op_roofs", "ROOFLINE_OPS"]

ROOFLINE_OPS = 12
"""The profiler's top operators placed against their roofs."""


@dataclass(frozen=True)
class OpRoof:
    """One operator against its roof (see the module docstring); rates per second."""

    name: str
    """As the profiler names it ("aten::mm")."""
    ms_per_step: float
    flops: int | None
    """FLOPs per step; None when the op carries none."""
    bytes: int | None
    """Bytes read and written per step; None when not counted."""
    intensity: float | None
    """FLOP per byte; None without both."""
    achieved_flops_per_s: float | None
    achieved_bytes_per_s: float | None
    roof_flops_per_s: float | None
    """min(peak, intensity x bandwidth), or the peak when the bytes are unknown."""
    pct_of_roof: float | None
    """Achieved FLOP/s over the roof; for an op without FLOPs, bytes/s over the bandwidth."""
    bound: str
    """"compute" (at or right of the ridge), "memory" (left of it, or no FLOPs), "" when unknown."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _roof(name: str, ms: float, flops: int | None, moved: int | None, peak: float | None,
          bandwidth: float | None) -> OpRoof:
    seconds = ms / 1000.0
    intensity = flops / moved if flops and moved else None
    achieved = flops / seconds if flops else None
    per_s = moved / seconds if moved else None
    roof = None
    if flops and peak:
        roof = min(peak, intensity * bandwidth) if intensity is not None and bandwidth else peak
    if achieved is not None and roof:
        pct = 100.0 * achieved / roof
    else:
        pct = 100.0 * per_s / bandwidth if per_s is not None and not flops and bandwidth else None
    if intensity is not None and peak and bandwidth:
        bound = "compute" if intensity * bandwidth >= peak else "memory"
    else:
        bound = "memory" if not flops and moved else ""
    return OpRoof(name=name, ms_per_step=ms, flops=flops, bytes=moved, intensity=intensity,
                  achieved_flops_per_s=achieved, achieved_bytes_per_s=per_s, roof_flops_per_s=roof,
                  pct_of_roof=pct, bound=bound)


def op_roofs(facts: Facts, peak: float | None, bandwidth: float | None,
             peaks: Mapping[str, float] | None = None) -> tuple[OpRoof, ...]:
    """The profiler's top operators of ``facts`` (by time per step) against their roofs;
    () without a profile, or when neither FLOPs nor bytes were counted. ``peaks``: the peak of
    an op whose kind runs in another dtype than the step's (an fp32 step's convolutions in
    TF32), by the FLOP count's op name ("aten.convolution"); ``peak`` for the others."""
    peaks = peaks or {}
    ops = facts.profile.top_ops if facts.profile else []
    if not ops or not (facts.flops_by_op or facts.bytes_by_op):
        return ()
    steps = max(1, int(facts.profile.steps or 1))
    roofs = []
    for op in ops[:ROOFLINE_OPS]:
        ms = max(op["self_cpu_ms"], op["self_device_ms"]) / steps
        key = op["name"].replace("::", ".")
        if ms > 0:
            roofs.append(_roof(op["name"], ms, facts.flops_by_op.get(key), facts.bytes_by_op.get(key),
                               peaks.get(key, peak), bandwidth))
    return tuple(roofs)
