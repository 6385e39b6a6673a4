"""When a tuning trial has measured enough: its ratio to the incumbent decided beyond noise.

A trial of a candidate need not run a fixed count of steps: once its steps put it faster
or slower than the incumbent by more than the search's margin (the least gain, or the
noise floor when that is larger), and by more than their own spread can explain, more
steps cannot change its verdict (a sequential test). A trial near the incumbent runs on
to its full length, where the pairs decide.

A floor keeps one long step out of the verdict: at least ``SEQUENTIAL_MIN_STEPS`` steps
and ``SEQUENTIAL_MIN_MS`` of them, and both the mean and the median must be decided, so
that one recompile or one collection pause among the first steps neither stops a trial
nor passes for its pace.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

__all__ = ["decided", "SEQUENTIAL_MIN_STEPS", "SEQUENTIAL_MIN_MS", "SEQUENTIAL_Z", "FASTER", "SLOWER"]

SEQUENTIAL_MIN_STEPS = 8
"""Fewest measured steps before a trial may stop decided: the median of 8 ignores up to 3
long steps, and one long step moves the mean by an eighth of its excess at most."""
SEQUENTIAL_MIN_MS = 2000.0
"""Fewest measured milliseconds before a trial may stop decided: fast steps get more of
them (a machine's hiccups last milliseconds, and a loader's queue drains in a few steps)."""
SEQUENTIAL_Z = 3.0
"""How many standard errors of the trial's own step times the ratio must clear the margin by."""

FASTER, SLOWER = "faster", "slower"


def decided(step_ms: Sequence[float], reference_ms: float, margin: float, *,
            min_steps: int = SEQUENTIAL_MIN_STEPS, min_ms: float = SEQUENTIAL_MIN_MS,
            z: float = SEQUENTIAL_Z) -> str | None:
    """:data:`FASTER` or :data:`SLOWER` once the trial's steps (``step_ms``, milliseconds)
    put its ratio to ``reference_ms`` (the incumbent's ms/step) below ``1 - margin``, or
    above ``1 / (1 - margin)``, by ``z`` standard errors of the steps' own spread, in both
    their mean and their median; None while undecided or below the floor."""
    n = len(step_ms)
    if n < min_steps or sum(step_ms) < min_ms or reference_ms <= 0 or not 0 <= margin < 1:
        return None
    median = statistics.median(step_ms)
    mean = statistics.fmean(step_ms)
    # The spread from the median absolute deviation: one long step does not widen it.
    sigma = 1.4826 * statistics.median(abs(x - median) for x in step_ms)
    half = z * 1.2533 * sigma / math.sqrt(n)  # the median's standard error is ~1.25x the mean's
    low, high = 1.0 - margin, 1.0 / (1.0 - margin)
    if all((centre + half) / reference_ms < low for centre in (mean, median)):
        return FASTER
    if all((centre - half) / reference_ms > high for centre in (mean, median)):
        return SLOWER
    return None
