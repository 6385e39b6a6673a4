"""One quick probe's measurement, as plain data: a switch's steps against plain steps.

The doctor times each switchable finding's fix in the script's own process
(:mod:`torchboost.observe.probes.quick`); a tuning trial's bursts use the same record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["QuickProbeFacts"]


@dataclass
class QuickProbeFacts:
    """One quick probe: steps timed with a technique's switch on against plain steps,
    interleaved (plain, switched, plain, switched...), after the profiler window."""

    finding_id: str
    """The finding whose fix was switched on."""
    label: str
    """What was switched on, in words ("bf16 autocast")."""
    plain_ms: list[float] = field(default_factory=list)
    """Total time of each plain step, milliseconds, in order."""
    switched_ms: list[float] = field(default_factory=list)
    """Total time of each switched step, milliseconds, each after the plain step of its pair."""
    warmup_ms: float | None = None
    """The first step with the switch on (first calls, kernel choice): in no figure."""
    error: str | None = None
    """Why the probe gave no ratio (an exception, a non-finite loss, no time left), or None."""

    @property
    def pair_ratios(self) -> list[float]:
        """Each pair's plain step time / switched step time, smallest first; [] after an error."""
        return [] if self.error else sorted(p / s for p, s in zip(self.plain_ms, self.switched_ms) if s > 0)

    @property
    def ratio(self) -> float | None:
        """The median of :attr:`pair_ratios` (above 1: the switch is faster); None without one."""
        pairs = self.pair_ratios
        if not pairs:
            return None
        mid = len(pairs) // 2
        return pairs[mid] if len(pairs) % 2 else (pairs[mid - 1] + pairs[mid]) / 2

    @property
    def steps(self) -> int:
        """The timed steps the ratio rests on, plain and switched."""
        pairs = min(len(self.plain_ms), len(self.switched_ms))
        return 2 * pairs
