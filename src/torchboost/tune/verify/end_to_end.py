"""What the end-to-end check decides of what it measured.

:class:`~torchboost.tune.trials.check_runs.EndToEnd` holds the whole runs of the baseline and
of the tuned configuration, in alternating pairs (:mod:`torchboost.tune.verify` runs them),
plain data kept with the trials' records; :func:`end_to_end_verdict` turns them into what is
written to torchboost.toml, in words.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from torchboost.config import Overlay
from torchboost.env import BUSY_PCT
from torchboost.tune.search.decision import TuneOutcome
from torchboost.tune.trials.check_runs import CLAIM_PAIRS, CLAIM_PRECISION, EndToEnd, median_rank, rank_rises_at
from torchboost.tune.trials.trial_result import describe_settings

__all__ = ["CLAIM_PAIRS", "CLAIM_PRECISION", "EndToEnd", "end_to_end_verdict", "median_rank", "nothing_kept", "rank_rises_at"]


def nothing_kept(outcome: TuneOutcome) -> str:
    """Why nothing was written: nothing measured beat the noise, a change measured faster had
    its losses left unjudged when the budget ran out, or the budget ran out first."""
    unjudged = next((d for d in outcome.decisions if d.status == "unconfirmed" and d.in_bursts and d.ratio), None)
    if unjudged is not None:
        return (f"nothing kept: {describe_settings(unjudged.settings)} measured {1.0 / unjudged.ratio:.2f}x a step in "
                "alternating bursts, but the budget ran out before its own run judged its losses; give tune a "
                "larger --budget")
    measured = any(d.status not in ("skipped", "unconfirmed") for d in outcome.decisions)
    if outcome.stopped_by_budget and not measured:
        return "nothing was measured: the budget ran out after the baseline"
    return "nothing was faster beyond noise"


def _busy(e2e: EndToEnd) -> str:
    """"; other processes used 40% of the machine throughout: ..." where the load held steady
    (the claim is verified) but above :data:`~torchboost.env.BUSY_PCT` all along, else ""."""
    span = e2e.load_range_pct
    if span is None or span[0] <= BUSY_PCT:
        return ""
    share = f"{span[0]:.0f}%" if round(span[0]) == round(span[1]) else f"{span[0]:.0f}-{span[1]:.0f}%"
    return (f"; other processes used {share} of the machine throughout: the figure is this load's, and a quieter "
            "machine may give another")


def end_to_end_verdict(settings: Overlay, decisions: Sequence[Any], e2e: EndToEnd,
                       min_gain: float) -> tuple[Overlay, str]:
    """What to write after the end-to-end check, and why: the tuned settings when they are
    faster by ``min_gain`` at the lower end of their interval (the runs' noise in it) over
    :data:`CLAIM_PAIRS` pairs or more, and still are once that lower end allows for the
    machine's load moving between the baseline and the pairs (:meth:`EndToEnd.load_moved`)
    ("verified"; where the load's move could account for it, on fewer pairs, faster still, or
    on none at all, they are said unverified, and the tuner writes them apart:
    :mod:`torchboost.tune.unverified`),
    or when a memory lever was kept to bring the peak under the memory limit (the check then
    gives its cost); else nothing ("no proven win")."""
    how, took = e2e.how, "would take" if e2e.projected_to else "took"
    memory = any(d.status == "kept" and d.memory_lever for d in decisions)
    claim, moved = e2e.faster(min_gain) and e2e.pairs >= CLAIM_PAIRS, e2e.load_moved(min_gain)
    if claim and moved and not memory:
        # Kept apart, not dropped: the pairs did measure it faster, under a load that moved.
        low = (e2e.interval or (math.nan, math.nan))[0]
        return settings, (f"not verified end to end: the machine's load moved between the baseline and the pairs "
                          f"({e2e.load_words()}), which alone can change a run's time by up to "
                          f"{e2e.load_factor:.2f}x (a script that keeps every core busy), and the interval's lower "
                          f"end, {low:.2f}x, over that is not {min_gain:.0%} faster; the pairs measured "
                          f"{e2e.words()} faster ({e2e.tuned_s:.1f} s against {e2e.baseline_s:.1f} s, of {how}) "
                          "under that load: compare them when the machine is as you will train on it")
    if claim and not moved:
        return settings, (f"verified end to end: {e2e.words()} faster ({e2e.tuned_s:.1f} s against "
                          f"{e2e.baseline_s:.1f} s, median of {e2e.pairs} alternating pairs of {how}){_busy(e2e)}")
    if e2e.faster(min_gain) and e2e.pairs < CLAIM_PAIRS:  # the search's pick, unverified
        return settings, (f"not verified end to end: {e2e.pairs} pair(s) of {how} fitted in --budget, fewer than "
                          f"the {CLAIM_PAIRS} a claim rests on; they measured {e2e.words()} faster "
                          f"({e2e.tuned_s:.1f} s against {e2e.baseline_s:.1f} s); give tune a larger --budget")
    if e2e.error is not None:
        return Overlay(), f"not kept: {e2e.error}; your configuration is left as it was"
    if not e2e.pairs:  # nothing measured against it: the search's pick stands, unverified
        return settings, (f"not verified end to end: the check finished no pair of {how} within its time (a run "
                          "took longer than the check had left)")
    if memory:
        # Kept to fit under the memory limit, not for speed: the check gives its cost.
        return settings, (f"kept to bring the peak under the memory limit: end to end it {took} {e2e.tuned_s:.1f} s "
                          f"against {e2e.baseline_s:.1f} s ({e2e.pairs} pairs of {how}), the time it costs")
    # Each side's median, and the median pair's ratio: under load the two can disagree (7.1 s
    # against 5.9 s read "(0.96x ...)"), so each is named for what it is.
    return Overlay(), (f"no proven win, not kept: end to end the tuned configuration {took} {e2e.tuned_s:.1f} s against "
                       f"{e2e.baseline_s:.1f} s, each side's median; the median pair {e2e.words()}, of {how}; "
                       f"the interval's lower end (the "
                       f"pairs' spread, and the runs' own noise, {e2e.noise:.1%}) is not {min_gain:.0%} faster"
                       f"{_load_moved_words(e2e, min_gain)}; your configuration is left as it was")


def _load_moved_words(e2e: EndToEnd, min_gain: float) -> str:
    """Where other processes' share of the machine moved enough to change a run's time by
    more than the least gain, the words that say so (the verdict may be the load's); else ''."""
    if e2e.load_factor < 1.0 + min_gain:
        return ""
    return (f", and {e2e.load_words()}, which alone can change a run's time by up to {e2e.load_factor:.2f}x: "
            "compare them when the machine is as you will train on it")
