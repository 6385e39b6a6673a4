"""How the end-to-end check is planned and priced: the pairs and the length of their runs
(:func:`plan_verification`), and the time the search keeps for it (:func:`reserve_s`), each
from the baseline's trial. The check's runs themselves are :mod:`~torchboost.tune.verify.check`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchboost.tune.trials.trial_length import least_capped_steps
from torchboost.tune.verify.end_to_end import CLAIM_PAIRS, rank_rises_at

__all__ = ["EXTRA_PAIRS", "OPEN_PAIRS", "PLAN_FILL", "RESERVED_PAIRS", "SHORTEST_MEASURED_STEPS", "VerifyPlan",
           "plan_verification", "reserve_s", "shortest_capped_steps", "shortest_pair_s", "shortest_run_s"]


@dataclass(frozen=True)
class VerifyPlan:
    """How the end-to-end check runs: pairs, and whole runs or a step count per run."""

    pairs: int
    steps: int | None
    """Steps per run; None: the whole script, to its own end."""
    run_limit_s: float
    """A whole run longer than this ends the attempt: the check falls back to ``steps``."""
    fallback_steps: int
    budget_s: float = 0.0
    """The check's whole time: pairs beyond ``pairs`` run only within it."""
    max_pairs: int = 0
    """At most this many pairs when the first ones leave the verdict open (0: ``pairs``)."""
    planned_steps: int | None = None
    """The user's planned run in steps, when known: capped runs are projected to it."""


EXTRA_PAIRS = 8
"""Pairs the check may add, within its budget, when the first leave the verdict open or the
claim imprecise: a gain of a few percent on whole runs that vary by as much needs a dozen
pairs to clear the gate (an image script's 1.10x over six pairs, 0.92-1.32, was left "no
proven win" with half its budget unspent)."""


PLAN_FILL = 0.75
"""The share of the check's time its planned pairs fill: the rest absorbs what a whole
process costs beyond a trial's fixed time (the run's wrapper, workers starting) and the
runs' noise. Planned to fill all of it, the demo's runs took 7-9 s where 6.9 s was planned,
and three of its four pairs fitted."""


SHORTEST_MEASURED_STEPS = 4
"""Steps after the warm-up in the shortest run the check plans: a run too long for what the
check has left is shortened to this (its second half gives its pace), never left to be cut
off mid-run (a 4 s-step baseline's 17-step runs outlasted a 79 s check: no pair finished)."""


def shortest_capped_steps(warmup: int) -> int:
    """The fewest steps a run of the check is shortened to: the warm-up's and
    :data:`SHORTEST_MEASURED_STEPS` after it."""
    return warmup + SHORTEST_MEASURED_STEPS


def plan_verification(*, pairs: int, budget_s: float, step_ms: float, fixed_s: float, trial_steps: int,
                      warmup: int, whole_run_s: float | None = None, planned_steps: int | None = None,
                      baseline_ms: float | None = None) -> VerifyPlan:
    """The most pairs, up to ``pairs``, whose runs fit :data:`PLAN_FILL` of ``budget_s``:
    whole runs, unless ``whole_run_s`` (the baseline's whole run, estimated) says they will
    not fit; else runs stopped after as many steps as a run's share holds at the pace of a
    pair (the mean of the tuned ``step_ms`` and ``baseline_ms``: a pair runs one of each).
    Sized at the tuned pace alone, a pair of a 1.2 s-step baseline and its 0.8 s bf16 ran
    longer than its share, and three of four pairs fitted.

    Where the pairs to the count whose interval bars a stray pair (:func:`rank_rises_at`)
    fit the whole budget at that pace in runs of at least :func:`least_capped_steps`, the
    runs are no longer than those pairs' share of the planned fill, or that least: an open
    verdict then has the time for them (:func:`~torchboost.tune.verify.check._more_pairs`), where four pairs sized to fill
    the budget left none.

    A run holds at least :func:`least_capped_steps`; where that leaves fewer pairs than a
    claim rests on (:data:`CLAIM_PAIRS`), the claim's pairs are kept and the runs shortened,
    down to :func:`shortest_capped_steps`; where not even one pair fits at that, the one
    pair is planned at the shortest runs (the check then says it could not finish)."""
    pace_ms = (step_ms + baseline_ms) / 2 if baseline_ms and baseline_ms > 0 else step_ms
    least = least_capped_steps(step_ms, trial_steps, warmup)
    shortest = min(least, shortest_capped_steps(warmup))

    def fitting(n: int, fill: float = PLAN_FILL) -> int:
        share = budget_s / (2 * n) * fill
        return int(max(0.0, share - fixed_s) * 1e3 / pace_ms) if pace_ms > 0 else trial_steps

    chosen, steps = 1, shortest
    for n in range(max(1, pairs), 0, -1):
        fits = fitting(n)
        if fits >= least or (fits >= shortest and (n >= CLAIM_PAIRS or n == 1)):
            chosen, steps = n, fits
            break
    wider = rank_rises_at(chosen)
    if chosen >= CLAIM_PAIRS and fitting(wider, fill=1.0) >= least:
        steps = min(steps, max(least, fitting(wider)))  # room left for the pairs an open verdict needs
    too_long = whole_run_s is not None and whole_run_s > budget_s / (2 * chosen) * PLAN_FILL
    if planned_steps and steps >= planned_steps:
        too_long = False  # runs capped past the planned run's end are whole runs (150 steps read "402")
    return VerifyPlan(pairs=chosen, steps=steps if too_long else None, run_limit_s=budget_s / (2 * chosen),
                      fallback_steps=steps, budget_s=budget_s, max_pairs=max(pairs, chosen) + EXTRA_PAIRS,
                      planned_steps=planned_steps)


RESERVED_PAIRS = CLAIM_PAIRS
"""Pairs of runs the search keeps time for (:func:`reserve_s`): the fewest a claim rests on."""
OPEN_PAIRS = rank_rises_at(CLAIM_PAIRS)
"""Pairs the search keeps time for where the check's share holds them (:func:`reserve_s`):
the claim's, and those to the count whose interval bars a stray pair at each end. Four
pairs rest on their slowest: the demo's check left two picks of five open on one pair at
1.00x or 0.96x, with no time for the three more that would have told."""


def shortest_run_s(wall_s: float, fixed_s: float, step_ms: float, *, trial_steps: int, warmup: int,
                   shortened: bool = False) -> float:
    """Seconds of the check's shortest run of a configuration measured at ``step_ms`` a step
    with ``fixed_s`` outside its steps: the whole script (a run of ``wall_s``), or one stopped
    after the fewest steps (:func:`least_capped_steps`; ``shortened``: the fewest a run is
    cut to when no pair of those fits, :func:`shortest_capped_steps`), whichever is shorter."""
    steps = least_capped_steps(step_ms, trial_steps, warmup)
    if shortened:
        steps = min(steps, shortest_capped_steps(warmup))
    capped = fixed_s + steps * step_ms / 1e3
    return min(wall_s, capped) if wall_s > 0 else capped


def reserve_s(wall_s: float, fixed_s: float, step_ms: float, *, trial_steps: int, warmup: int,
              most_s: float, tuned_ms: float | None = None) -> float:
    """Seconds to keep for the end-to-end check, from the baseline's trial, both runs of a
    pair at its pace, start-up included: the first that fits in ``most_s`` of
    :data:`OPEN_PAIRS` pairs of its shortest runs (:func:`shortest_run_s`: room for the pairs
    an open verdict needs) over :data:`PLAN_FILL`, :data:`RESERVED_PAIRS` of them, as many of runs shortened to the
    warm-up's need, or one pair of shortened runs (said unverified,
    with the command that verifies it); 0 when not even that fits (the check is then skipped
    and says so, and the search has the time). Short of a claim, the search's time is worth
    more than longer runs or a second pair: on 5 s steps beside a busy loop, one pair of
    17-step runs (196 s) left the search no time after its baseline; the check takes what is
    left at the end in any case. ``tuned_ms``: the pace of the configuration kept so far, for
    the tuned run of each pair (None: the baseline's): one thread kept at a third of a busy
    baseline's step gives the search back the time its runs will not take."""
    def pair_s(shortened: bool) -> float:
        return shortest_pair_s(wall_s, fixed_s, step_ms, trial_steps=trial_steps, warmup=warmup, tuned_ms=tuned_ms,
                               shortened=shortened)

    # Seven pairs with the margin the check's plan keeps (PLAN_FILL): priced at exactly seven
    # of the trials' pairs, the demo's check ran six of 9.2 s in the 60 s it had.
    options = ((OPEN_PAIRS, False, 1.0 / PLAN_FILL), (RESERVED_PAIRS, False, 1.0), (RESERVED_PAIRS, True, 1.0),
               (1, True, 1.0))
    return next((n * pair_s(cut) * margin for n, cut, margin in options if n * pair_s(cut) * margin <= most_s), 0.0)


def shortest_pair_s(wall_s: float, fixed_s: float, step_ms: float, *, trial_steps: int, warmup: int,
                    tuned_ms: float | None = None, shortened: bool = False) -> float:
    """Seconds of the check's shortest pair: the baseline's shortest run (:func:`shortest_run_s`)
    and the tuned one at ``tuned_ms`` (None: the baseline's pace), each at least a second. The
    one price of a pair: the reserve is kept in it and the check starts only where one fits."""
    baseline = shortest_run_s(wall_s, fixed_s, step_ms, trial_steps=trial_steps, warmup=warmup, shortened=shortened)
    tuned = baseline if tuned_ms is None else shortest_run_s(0.0, fixed_s, tuned_ms, trial_steps=trial_steps,
                                                              warmup=warmup, shortened=shortened)
    return max(baseline, 1.0) + max(tuned, 1.0)
