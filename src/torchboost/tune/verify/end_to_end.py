"""What the end-to-end check measured, and what it decides.

:class:`EndToEnd` holds the whole runs of the baseline and of the tuned configuration, in
alternating pairs (:mod:`torchboost.tune.verify` runs them), projected to the planned run
when they were stopped short; its interval, noise and verdict are plain arithmetic on them.
:func:`end_to_end_verdict` turns them into what is written to torchboost.toml, in words.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from torchboost.config import Overlay
from torchboost.env import BUSY_PCT
from torchboost.tune.search.decision import TuneOutcome
from torchboost.tune.trials.trial_result import describe_settings

__all__ = ["CLAIM_PAIRS", "CLAIM_PRECISION", "EndToEnd", "end_to_end_verdict", "median_rank", "nothing_kept"]

MEDIAN_CONFIDENCE = 0.875
"""How sure the interval of the median pair is to hold it (four pairs' extremes: 87.5%)."""
CLAIM_PAIRS = 4
"""Pairs of whole runs a verified claim rests on, at least."""
CLAIM_PRECISION = 0.10
"""How close to the claim a user's own re-measure should come; an interval wider than
this on either side gets more pairs while the budget allows."""
FULL_LOAD_PCT = 99.0
"""The most of the machine a load is taken to hold in :attr:`EndToEnd.load_factor` (all of
it would leave a script no time at all: an unbounded factor)."""


@dataclass
class EndToEnd:
    """What the end-to-end check measured (seconds, whole processes)."""

    baseline_runs_s: list[float] = field(default_factory=list)
    tuned_runs_s: list[float] = field(default_factory=list)
    steps: int | None = None
    """Steps each run took; None: every run was the whole script."""
    error: str | None = None
    """Why the check could not finish (a crash of the tuned configuration, say)."""
    out_of_time: bool = False
    """Fewer pairs than planned: the next would not have fitted in the check's time."""
    planned_steps: int | None = None  # the user's planned run: capped runs are projected to it when longer
    baseline_pace_ms: list[float] = field(default_factory=list)
    """Each capped baseline run's own pace: the mean step of its second half."""
    tuned_pace_ms: list[float] = field(default_factory=list)
    ran: list[int | None] = field(default_factory=list)
    """Per capped run: the steps it ran when the script ended on its own before the cap, else None."""
    search_load_pct: float | None = None
    """Other processes' CPU use while the search measured the baseline's trial, percent of
    the machine (None: not known)."""
    baseline_loads_pct: list[float] = field(default_factory=list)
    """Other processes' CPU use through each baseline run of the pairs, percent of the machine."""
    tuned_loads_pct: list[float] = field(default_factory=list)
    """The same through each tuned run (reported; the load rule reads the baseline's side,
    where what counts as the script's own is counted alike: see :attr:`load_range_pct`)."""

    @property
    def whole_steps(self) -> int | None:
        """The script's own length when every capped run ended on its own before the cap:
        the runs were whole, whatever the cap; else None."""
        return max(self.ran) if self.ran and all(self.ran) else None  # type: ignore[type-var]

    @property
    def projected_to(self) -> int | None:
        """The planned steps the capped runs are projected to; None when they are not
        (whole runs, an unknown or shorter planned run, a run without its pace)."""
        planned, steps = self.planned_steps, self.steps
        complete = (len(self.baseline_pace_ms) == len(self.baseline_runs_s)
                    and len(self.tuned_pace_ms) == len(self.tuned_runs_s))
        ok = steps is not None and planned is not None and planned > steps and complete and self.whole_steps is None
        return planned if ok else None

    @property
    def judged_runs_s(self) -> tuple[list[float], list[float]]:
        """(baseline, tuned) seconds as the check judges them: measured, or projected to the
        planned run (each run plus the steps it did not run at its own pace)."""
        if self.projected_to is None or self.steps is None:
            return list(self.baseline_runs_s), list(self.tuned_runs_s)
        more = self.projected_to - self.steps
        return ([run + more * pace / 1e3 for run, pace in zip(self.baseline_runs_s, self.baseline_pace_ms)],
                [run + more * pace / 1e3 for run, pace in zip(self.tuned_runs_s, self.tuned_pace_ms)])

    @property
    def spent_s(self) -> float:
        """Seconds the runs measured so far took."""
        return sum(self.baseline_runs_s) + sum(self.tuned_runs_s)

    @property
    def pairs(self) -> int:
        return min(len(self.baseline_runs_s), len(self.tuned_runs_s))

    @property
    def ratios(self) -> list[float]:
        """Tuned / baseline, pair by pair (below 1: the tuned run was faster); projected runs
        when :attr:`projected_to` is set."""
        base, tuned = self.judged_runs_s
        return [t / b for b, t in zip(base, tuned) if b > 0]

    @property
    def baseline_s(self) -> float | None:
        """Median of the baseline's runs in whole pairs."""
        runs = self.judged_runs_s[0][:self.pairs]
        return statistics.median(runs) if runs else None

    @property
    def tuned_s(self) -> float | None:
        """Median of the tuned runs in whole pairs (an unfinished pair's run is in neither)."""
        runs = self.judged_runs_s[1][:self.pairs]
        return statistics.median(runs) if runs else None

    @property
    def how(self) -> str:
        """"whole runs", "runs of 178 steps", or "runs of 178 steps, projected to the planned 5000"."""
        if self.steps is None or self.whole_steps:
            return f"whole runs ({self.whole_steps} steps)" if self.whole_steps else "whole runs"
        projected = (f", projected to the planned {self.projected_to} (each run's time plus the steps it did "
                     "not run at its own pace)") if self.projected_to else ""
        return f"runs of {self.steps} steps{projected}"

    @property
    def speedup(self) -> float | None:
        """Baseline over tuned, from the median pair ratio (robust to the machine drifting)."""
        return 1.0 / statistics.median(self.ratios) if self.ratios else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The speedup's interval: the exact, distribution-free interval of the median pair
        (:func:`median_rank`: the k-th lowest and highest pair speedup, at least 87.5% sure
        to hold the median; the extremes up to six pairs, the second from seven), each side
        at least the runs' own :attr:`noise` from the median (a few pairs that happen to
        agree say little of the next run on a noisy machine), and as far from it as the
        other side, by ratio (a few pairs cannot tell which way the next ones fall: claims
        of 1.41x [1.38-1.47] and 1.28x [1.15-1.29] were re-measured at 1.36x and 1.33x)."""
        speedups = sorted(1.0 / r for r in self.ratios if r > 0)
        if not speedups:
            return None
        trim = median_rank(len(speedups)) - 1
        median = self.speedup or speedups[0]
        reach = max(1.0 + self.noise, median / speedups[trim], speedups[len(speedups) - 1 - trim] / median)
        return median / reach, median * reach

    def words(self) -> str:
        """"1.22x (1.05-1.38, 3 pairs)"; "0.82x (one pair: no interval)"."""
        if self.pairs == 1:
            return f"{self.speedup or math.nan:.2f}x (one pair: no interval)"
        low, high = self.interval or (math.nan, math.nan)
        return f"{self.speedup or math.nan:.2f}x ({low:.2f}-{high:.2f}, {self.pairs} pairs)"

    def undecided(self, min_gain: float) -> bool:
        """The median pair clears the gate and the interval's lower end does not: more pairs would tell."""
        return (self.error is None and bool(self.ratios) and statistics.median(self.ratios) < 1.0 - min_gain
                and not self.faster(min_gain))

    def imprecise(self) -> bool:
        """The interval reaches farther than :data:`CLAIM_PRECISION` from the claim on either
        side: what the user re-measures may differ from the claim by more than that, and
        more pairs would narrow it."""
        interval, claim = self.interval, self.speedup
        return (self.error is None and interval is not None and claim is not None
                and (interval[0] < claim / (1 + CLAIM_PRECISION) or interval[1] > claim * (1 + CLAIM_PRECISION)))

    @property
    def noise(self) -> float:
        """Run-to-run noise of whole runs: the median departure from 1 of each arm's
        consecutive runs' ratios (its own A/A; whole runs vary far less than short trials)."""
        drift = [abs(later / earlier - 1.0) for runs in self.judged_runs_s
                 for earlier, later in zip(runs, runs[1:]) if earlier > 0]
        return statistics.median(drift) if drift else 0.0

    @property
    def load_range_pct(self) -> tuple[float, float] | None:
        """The least and the most of the machine other processes used, from the baseline's
        trial through the baseline runs of the pairs (None: fewer than two readings). Read
        on the baseline's side only: it is the same configuration throughout, so what its
        meter counts as the script's own is the same; a tuned run's compile workers that
        outlive it would read as another process's load."""
        readings = ([self.search_load_pct] if self.search_load_pct is not None else []) + self.baseline_loads_pct
        return (min(readings), max(readings)) if len(readings) >= 2 else None

    @property
    def load_factor(self) -> float:
        """How much the load's move alone could change a run's time, at most: other processes
        using L% of the machine leave a script that keeps every core busy (100 - L)% of it, so
        a load that moved from the least to the most seen stretches its run by up to
        (100 - least) / (100 - most); 1.0 with a steady load or fewer than two readings."""
        span = self.load_range_pct
        if span is None:
            return 1.0
        least, most = (min(p, FULL_LOAD_PCT) for p in span)
        return (100.0 - least) / (100.0 - most)

    def load_moved(self, min_gain: float) -> bool:
        """The pairs clear the gate, but not once their interval's lower end is divided by
        :attr:`load_factor`: a speedup measured at one load is not the speedup at another
        (a neighbour's threads cost the configuration that keeps every core busy more), and
        by up to that factor between the loads seen; the pairs' spread never saw that move,
        so the claim could be the load's rather than the configuration's."""
        interval = self.interval
        if interval is None or not self.faster(min_gain):
            return False
        return 1.0 / (interval[0] / self.load_factor) >= 1.0 - min_gain

    def load_words(self) -> str:
        """"other processes used 10% of the machine while tune measured the baseline and 12-45%
        through the pairs' baseline runs" (one figure where the runs' readings agree)."""
        runs = self.baseline_loads_pct
        through = (f"{min(runs):.0f}-{max(runs):.0f}%" if runs and round(min(runs)) != round(max(runs))
                   else f"{runs[0]:.0f}%" if runs else "an unknown share")
        before = (f"{self.search_load_pct:.0f}% of the machine while tune measured the baseline and "
                  if self.search_load_pct is not None else "")
        return f"other processes used {before}{through} through the pairs' baseline runs"

    def faster(self, min_gain: float) -> bool:
        """The interval's lower end (the runs' noise in it) is at least ``min_gain`` faster:
        the slowest pair (bar one, from five) clears the gate, and so does the median
        slowed by the noise."""
        interval = self.interval
        return interval is not None and self.error is None and 1.0 / interval[0] < 1.0 - min_gain

    def to_dict(self) -> dict[str, Any]:
        """report.json's ``end_to_end``."""
        return {"baseline_s": self.baseline_s, "tuned_s": self.tuned_s, "speedup": self.speedup,
                "interval": list(self.interval) if self.interval else None, "pairs": self.pairs,
                "steps": self.steps, "whole_run": self.steps is None, "noise": self.noise,
                "projected_to": self.projected_to, "whole_steps": self.whole_steps,
                "load_factor": self.load_factor,
                **{k: v for k, v in asdict(self).items()
                   if k in ("baseline_runs_s", "tuned_runs_s", "baseline_pace_ms", "tuned_pace_ms", "error",
                            "out_of_time", "search_load_pct", "baseline_loads_pct", "tuned_loads_pct")}}



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


def median_rank(pairs: int, confidence: float = MEDIAN_CONFIDENCE) -> int:
    """The largest k (at least 1) such that the k-th lowest and k-th highest of ``pairs``
    values hold their median with at least ``confidence``: 1 - 2 P(Binomial(pairs, 1/2) < k)."""
    k = 1
    while k < pairs // 2:
        below = sum(math.comb(pairs, i) for i in range(k + 1)) / 2 ** pairs  # P(fewer than k + 1 under it)
        if 1.0 - 2.0 * below < confidence:
            break
        k += 1
    return k


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
                       f"pairs' spread, and the runs' own noise, {e2e.noise:.1%}) is not {min_gain:.0%} faster; "
                       "your configuration is left as it was")
