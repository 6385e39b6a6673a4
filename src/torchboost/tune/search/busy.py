"""Too busy (or too noisy) to tell: when the noise floor is wider than the top candidate could gain."""

from __future__ import annotations

from torchboost.env import BUSY_PCT
from torchboost.tune.search.decision import Decision, Status

__all__ = ["too_busy", "top_unmeasured"]


def too_busy(top: Decision | None, expected: float | None, noise: float, load_pct: float,
             trial_s: float, pairs: int, busy_pct: float = BUSY_PCT, *, varied: str | None = None) -> str | None:
    """A warning when the top candidate (its decision ``top``; ``expected``: the doctor's
    ratio for it, above 1 faster; None when the doctor measured none, and ``top`` is the
    first candidate left undecided) was left undecided by a noise floor (a fraction) wider
    than the gain it could show: the most load seen in a trial (percent of the machine), the candidate a
    quieter run would measure first, and how long that would take (baseline and ``pairs``
    pairs of ``trial_s`` seconds each). With no more load than ``busy_pct`` the variation is
    the script's own: "too noisy to tell", and longer trials are what would tell. None when
    the search could tell. ``varied``: how the measurement that left it undecided varied, in
    words, when that was not two runs of the same settings (alternating bursts in one run)."""
    if top is None or (expected is not None and expected <= 1.0):
        return None
    gain = 1.0 - 1.0 / expected if expected is not None else 0.0
    if noise <= gain or top.status not in (Status.NOT_BEYOND_NOISE, Status.UNCONFIRMED):
        return None
    what = top.subject or top.title
    could = (f"more than the {gain:.0%} {what} could gain (x{expected:.2f} by the doctor)" if expected is not None
             else f"too much to tell {what} apart")
    varied = varied or f"the same settings measured twice varied by {noise:.0%}"
    if load_pct <= busy_pct:  # nobody else was there: the script's own runs vary this much
        return (f"too noisy to tell: {varied} with other processes "
                f"using at most {load_pct:.0f}% of the machine, {could}; the script's own runs vary this much: "
                "longer trials (--steps-per-trial) would average it out")
    quiet_s = (1 + 2 * pairs) * trial_s
    return (f"too busy to tell: other processes used up to {load_pct:.0f}% of the machine, and {varied}, "
            f"{could}; on a quieter machine tune would measure it first "
            f"and decide in about {quiet_s:.0f} s")


def top_unmeasured(label: str, expected: float, load_pct: float, trial_s: float, pairs: int) -> str:
    """The warning when the budget ran out before the top candidate (``label``, the doctor's
    ratio ``expected`` for it) was measured at all: the load seen while the baseline ran
    (percent of the machine), and how much longer the search needs at the baseline trial's
    pace (``trial_s`` a trial: its screening and ``pairs`` pairs)."""
    more_s = (1 + 2 * pairs) * trial_s
    return (f"too busy to tell: the budget ran out before the top candidate, {label} (x{expected:.2f} by the "
            f"doctor), was measured; a trial took {trial_s:.0f} s with other processes using {load_pct:.0f}% of "
            f"the machine. Tune would measure it first: give it about {more_s:.0f} s more of --budget at this pace, "
            "or tune on a quieter machine")
