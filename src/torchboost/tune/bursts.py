"""Short alternating bursts: a candidate timed against the incumbent inside one process.

On a busy machine two trials a minute apart see different loads, and the A/A noise floor
grows wider than the gain a candidate could show: pairs of trials cannot tell. A change
that is an in-process switch (bf16 autocast, bf16 math in fp32 matmuls, the fused
optimizer: a technique's ``quick_probe``) can instead be turned on and off between steps
of one run of the incumbent: a burst of plain steps, a burst with the switch on, and so
on (:attr:`~torchboost.observe.spec.ObserveSpec.bursts`). Each pair of bursts is seconds
apart, so another process slows both sides of it alike, and the median of the pairs'
ratios is the candidate's ratio measured under the load there was.

Its verdict rests on the pairs' own spread: faster once the median clears the least gain by
``BURST_Z`` standard errors, slower once it is above 1 by as much, no gain once its
interval lies above the least gain; otherwise undecided, and the search says the machine
was too busy to tell.
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

from torchboost.config import Overlay
from torchboost.observe.spec import Bursts
from torchboost.tune.decision import Status
from torchboost.tune.trial_result import TrialResult

__all__ = ["BURST_MS", "BURST_Z", "MIN_BURST_PAIRS", "MAX_BURST_PAIRS", "plan_bursts", "burst_verdict", "burst_decision",
           "FASTER", "SLOWER", "NO_GAIN"]

BURST_MS = 50.0
"""Least time of one burst: steps faster than this are grouped, so a timer's jitter and
the switch's own cost are small beside a burst."""
MIN_BURST_PAIRS = 6
MAX_BURST_PAIRS = 30
"""Pairs of bursts in one burst trial: about an ordinary trial's steps, within these bounds."""
BURST_Z = 3.0
"""Standard errors of the pairs' ratios the median must clear the least gain by."""

FASTER, SLOWER, NO_GAIN = "faster", "slower", "no gain"


def plan_bursts(change: Overlay, step_ms: float, trial_steps: int) -> Bursts:
    """The bursts for ``change`` on an incumbent of ``step_ms`` a step: bursts of at least
    :data:`BURST_MS`, as many pairs as fill about ``trial_steps`` steps."""
    steps = max(1, math.ceil(BURST_MS / step_ms)) if step_ms > 0 and math.isfinite(step_ms) else 1
    pairs = min(MAX_BURST_PAIRS, max(MIN_BURST_PAIRS, trial_steps // (2 * steps)))
    return Bursts(change=Overlay(change).to_dict(), steps=steps, pairs=pairs)


def burst_verdict(ratios: Sequence[float], min_gain: float, z: float = BURST_Z) -> tuple[str | None, float, float]:
    """(the verdict, the median ratio, its half-width) for the pairs' ``ratios`` (candidate
    over incumbent), the half-width ``z`` standard errors of the ratios' own spread (from
    their median absolute deviation: one long step does not widen it). The verdict:
    :data:`FASTER` when the interval is below ``1 - min_gain``, :data:`SLOWER` when above 1,
    :data:`NO_GAIN` when above ``1 - min_gain`` otherwise; None when it straddles it."""
    if len(ratios) < 3:
        return None, statistics.median(ratios) if ratios else math.nan, math.inf
    median = statistics.median(ratios)
    sigma = 1.4826 * statistics.median(abs(r - median) for r in ratios)
    half = z * 1.2533 * sigma / math.sqrt(len(ratios))
    if median + half < 1.0 - min_gain:
        return FASTER, median, half
    if median - half > 1.0:
        return SLOWER, median, half
    if median - half >= 1.0 - min_gain:
        return NO_GAIN, median, half
    return None, median, half


def burst_decision(trial: TrialResult, min_gain: float, noise: float) -> tuple[Status | None, str, float]:
    """A burst trial's decision on its candidate: (the status, or None when undecided; the
    reason in words; the median ratio). ``noise``: the pairs' A/A noise floor it stood in for."""
    ratios = trial.burst_ratios
    if not trial.ok or not ratios:
        return None, f"alternating bursts in one run gave no ratio: {trial.burst_error or trial.error}", math.nan
    verdict, ratio, half = burst_verdict(ratios, min_gain)
    said = (f"median ratio {ratio:.3f} ± {half:.3f} over {len(ratios)} pairs of alternating bursts in one run "
            f"(runs measured apart varied by {noise:.0%})")
    if verdict is None:
        return None, f"{said}: not decided either way", ratio
    status = {FASTER: Status.KEPT, SLOWER: Status.SLOWER, NO_GAIN: Status.NOT_BEYOND_NOISE}[verdict]
    return status, said + ("" if verdict == FASTER else f": not {min_gain:.0%} faster"), ratio
