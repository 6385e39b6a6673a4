"""Finding: one diagnosis, with its evidence, its fix and the gain expected from it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = ["Finding", "Evidence", "severity_for"]

Evidence = dict[str, Union[float, int, str]]
"""The numbers (and a few words) a finding rests on, keyed by name with units in the name."""

SEVERITIES = ("high", "medium", "low")
UNITS = ("step", "sample")


def severity_for(expected_speedup: float) -> str:
    """"high" from a 1.25x expected speedup, "medium" from 1.05x, else "low"."""
    if expected_speedup >= 1.25:
        return "high"
    if expected_speedup >= 1.05:
        return "medium"
    return "low"


@dataclass
class Finding:
    """What bounds the step, why we think so, and what to change.

    ``expected_speedup`` is the estimated ratio old step time / new step time (above 1
    is faster) for this change alone, computed by ``formula`` from ``evidence``.
    """

    id: str
    """Stable identifier, e.g. "data.workers"; one per rule in ``RULES``."""
    title: str
    """One line, in words a PyTorch user would use."""
    evidence: Evidence
    """The numbers the finding rests on (units in the keys: ``_ms``, ``_pct``, ``_bytes``)."""
    fix_toml: str
    """A ``torchboost.toml`` fragment that applies the fix ("#" comments when no key does)."""
    fix_torch: str
    """The same change written in plain PyTorch."""
    expected_speedup: float
    """Estimated step-time ratio before / after the fix (> 1 is faster)."""
    formula: str
    """How ``expected_speedup`` was computed, with the inputs' values."""
    severity: str = ""
    """"high" | "medium" | "low"; derived from ``expected_speedup`` when left empty."""
    notes: list[str] = field(default_factory=list)
    """Caveats: assumptions, costs, what to check after applying the fix."""
    changes_training: bool = False
    """The fix changes what is trained (batch size, learning rate...), not only how fast:
    such findings are listed apart from the neutral speedups, never ranked with them."""
    unit: str = "step"
    """What ``expected_speedup`` is a ratio of: "step" (time per optimizer step, the same
    samples per step) or "sample" (time per training sample, when the step's size changes)."""

    def __post_init__(self) -> None:
        if not self.severity:
            self.severity = severity_for(self.expected_speedup)
        if self.unit not in UNITS:
            raise ValueError(f"Finding.unit: expected one of {', '.join(UNITS)}; got {self.unit!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"Finding.severity: expected one of {', '.join(SEVERITIES)}; got {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (the fields, as named here)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
