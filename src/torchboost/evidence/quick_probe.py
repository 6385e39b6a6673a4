"""One quick probe's measurement, as plain data: a switch's steps against plain steps.

The doctor times each switchable finding's fix in the script's own process
(:mod:`torchboost.observe.probes.quick`); a tuning trial's bursts use the same record.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence

__all__ = ["BURST_Z", "FASTER", "MIN_DECIDING_PAIRS", "NO_GAIN", "SLOWER", "QuickProbeFacts", "burst_verdict",
           "bursts_decided", "pairs_agree"]

BURST_Z = 3.0
"""Standard errors of the pairs' ratios the median must clear the least gain by."""

FASTER, SLOWER, NO_GAIN = "faster", "slower", "no gain"


def pairs_agree(ratios: Sequence[float], median: float | None = None) -> bool:
    """Every pair's ratio on the same side of 1 as their median (``median`` when given, as
    for the smallest and largest pair alone): the pairs measured one way. Pairs that
    disagree (another process slowed some steps many times over: ratios of 0.007, 0.02,
    100.7 and 0.035) tell nothing either way, nor did a median of exactly 1. Either way
    round (plain over switched, switched over plain): the doctor's quick probes
    (:attr:`~torchboost.evidence.findings.Measured.agree`) and tune's bursts
    (:func:`burst_verdict`) decide by this one rule. True for no pairs: none disagrees."""
    if not ratios:
        return True
    mid = statistics.median(ratios) if median is None else median
    return max(ratios) < 1.0 if mid < 1.0 else min(ratios) > 1.0 if mid > 1.0 else False


def burst_verdict(ratios: Sequence[float], min_gain: float, z: float = BURST_Z) -> tuple[str | None, float, float]:
    """(the verdict, the median ratio, its half-width) for the pairs' ``ratios`` (candidate
    over incumbent), the half-width ``z`` standard errors of the ratios' own spread (from
    their median absolute deviation: one long step does not widen it). The verdict:
    :data:`FASTER` when the interval is below ``1 - min_gain``, :data:`SLOWER` when above 1,
    :data:`NO_GAIN` when above ``1 - min_gain`` otherwise; None when it straddles it. Faster
    or slower says which way the switch goes, and is None where the pairs disagree
    (:func:`pairs_agree`: the spread of the rest says nothing of a pair measured the other
    way round); no gain is pairs about 1, on both its sides."""
    if len(ratios) < 3:
        return None, statistics.median(ratios) if ratios else math.nan, math.inf
    median = statistics.median(ratios)
    sigma = 1.4826 * statistics.median(abs(r - median) for r in ratios)
    half = z * 1.2533 * sigma / math.sqrt(len(ratios))
    one_way = pairs_agree(ratios, median)
    if median + half < 1.0 - min_gain:
        return FASTER if one_way else None, median, half
    if median - half > 1.0:
        return SLOWER if one_way else None, median, half
    if median - half >= 1.0 - min_gain:
        return NO_GAIN, median, half
    return None, median, half


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


MIN_DECIDING_PAIRS = 4
"""Fewest pairs of bursts whose verdict ends a burst trial's bursts early (:func:`bursts_decided`)."""


def bursts_decided(ratios: Sequence[float], *, min_gain: float) -> bool:
    """The pairs' ``ratios`` so far (switched over plain) settle the candidate either way
    (:func:`burst_verdict`), over :data:`MIN_DECIDING_PAIRS` at least: a burst trial ends its
    bursts there (one thread beside a busy loop, at 0.26 of the step, is decided after four
    pairs of 4 s steps, not the twelve planned)."""
    return len(ratios) >= MIN_DECIDING_PAIRS and burst_verdict(ratios, min_gain)[0] is not None
