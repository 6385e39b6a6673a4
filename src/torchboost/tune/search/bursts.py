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
interval lies above the least gain. Pairs that disagree (some faster, some slower: the
doctor's rule for its quick probes, :func:`~torchboost.evidence.quick_probe.pairs_agree`)
decide neither faster nor slower, however tight the rest. While undecided with its median on the faster side
(a gain the noise hides, not one that cannot be) and its pairs agreeing, another burst
trial runs and the pairs are pooled, up to ``MAX_BURST_RUNS`` runs or the end of the budget
(:func:`more_bursts`); still undecided, the search says the machine was too busy to tell.
"""

from __future__ import annotations

import math
from typing import Sequence

from torchboost.config import Overlay
from torchboost.evidence.quick_probe import BURST_Z, FASTER, NO_GAIN, SLOWER, burst_verdict, pairs_agree
from torchboost.plan import Bursts
from torchboost.tune.search.decision import Status

__all__ = ["BURST_MS", "BURST_Z", "MIN_BURST_PAIRS", "MAX_BURST_PAIRS", "MAX_BURST_RUNS", "plan_bursts", "burst_verdict",
           "burst_decision", "burst_spread", "more_bursts", "FASTER", "SLOWER", "NO_GAIN"]

BURST_MS = 50.0
"""Least time of one burst: steps faster than this are grouped, so a timer's jitter and
the switch's own cost are small beside a burst."""
MIN_BURST_PAIRS = 6
MAX_BURST_PAIRS = 30
"""Pairs of bursts in one burst trial: about an ordinary trial's steps, within these bounds."""
MAX_BURST_RUNS = 4
"""Burst trials pooled for one candidate at most."""



def plan_bursts(change: Overlay, step_ms: float, trial_steps: int, min_gain: float | None = None) -> Bursts:
    """The bursts for ``change`` on an incumbent of ``step_ms`` a step: bursts of at least
    :data:`BURST_MS`, as many pairs as fill about ``trial_steps`` steps; with ``min_gain``,
    the trial ends its bursts once their verdict is decided (:func:`burst_verdict`)."""
    steps = max(1, math.ceil(BURST_MS / step_ms)) if step_ms > 0 and math.isfinite(step_ms) else 1
    pairs = min(MAX_BURST_PAIRS, max(MIN_BURST_PAIRS, trial_steps // (2 * steps)))
    return Bursts(change=Overlay(change), steps=steps, pairs=pairs, min_gain=min_gain)


def more_bursts(ratios: Sequence[float], min_gain: float, runs: int) -> bool:
    """Whether another burst trial is worth running after ``runs`` gave ``ratios``: still
    undecided, the median on the faster side of the least gain, pairs that agree (pooled,
    pairs that disagree still would), and runs left."""
    verdict, median, _ = burst_verdict(ratios, min_gain)
    return verdict is None and median < 1.0 - min_gain and pairs_agree(ratios) and runs < MAX_BURST_RUNS


def burst_spread(ratios: Sequence[float], min_gain: float, where: str) -> tuple[float, str]:
    """How the pairs' ``ratios`` of bursts ``where`` ("in one run") varied: (as a fraction,
    infinite when the pairs disagree; in words)."""
    verdict, median, half = burst_verdict(ratios, min_gain)
    if verdict is None and not pairs_agree(ratios):
        return math.inf, (f"alternating bursts of it {where} disagreed, their pairs' ratios from {min(ratios):.3f} "
                          f"to {max(ratios):.3f} about a median of {median:.3f}")
    return half, f"alternating bursts of it {where} put its ratio at {median:.3f} ± {half:.3f}"


def burst_decision(ratios: Sequence[float], min_gain: float, noise: float | None, *, runs: int = 1,
                   error: str | None = None) -> tuple[Status | None, str, float]:
    """The decision on a candidate from the pairs' ``ratios`` of its ``runs`` burst trials:
    (the status, or None when undecided; the reason in words; the median ratio). ``noise``:
    the A/A noise floor of runs measured apart, when pairs of runs measured it (None: they
    did not); ``error``: why a burst trial gave no ratio."""
    if not ratios:
        return None, f"alternating bursts in one run gave no ratio: {error}", math.nan
    verdict, ratio, half = burst_verdict(ratios, min_gain)
    where = "in one run" if runs == 1 else f"in {runs} runs"
    apart = f" (runs measured apart varied by {noise:.0%})" if noise is not None else ""
    if verdict is None and not pairs_agree(ratios):  # no ±: the rest's spread says nothing of a pair the other way
        return None, (f"median ratio {ratio:.3f} over {len(ratios)} pairs of alternating bursts {where}{apart}, "
                      f"its pairs from {min(ratios):.3f} to {max(ratios):.3f}: pairs disagreed (some faster, some "
                      "slower), not decided either way"), ratio
    said = f"median ratio {ratio:.3f} ± {half:.3f} over {len(ratios)} pairs of alternating bursts {where}{apart}"
    if verdict is None:
        return None, f"{said}: not decided either way", ratio
    status = {FASTER: Status.KEPT, SLOWER: Status.SLOWER, NO_GAIN: Status.NOT_BEYOND_NOISE}[verdict]
    return status, said + ("" if verdict == FASTER else f": not {min_gain:.0%} faster"), ratio
