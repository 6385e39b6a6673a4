"""The check's records: what the end-to-end check's whole runs measured (:class:`EndToEnd`) and
the configuration it could not confirm, written apart (:class:`Unverified`).

Plain data, as a trial's :class:`~torchboost.tune.trials.trial_result.TrialResult` is: the
check's runs are the user's script run under a plan, as a trial is, and journaled beside
the trials (:class:`~torchboost.tune.trials.journal.RunJournal`). The check
(:mod:`torchboost.tune.verify`) fills them and judges them; a tune's run data
(:mod:`torchboost.tune.run_data`) holds them without depending on the check. An
:class:`EndToEnd` holds the runs of the baseline and of the tuned configuration, in
alternating pairs, projected to the planned run when they were stopped short; its interval,
noise and load are plain arithmetic on them.
"""

from __future__ import annotations

import math
import shlex
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CLAIM_PAIRS", "CLAIM_PRECISION", "EndToEnd", "Unverified", "median_rank", "rank_rises_at"]

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
        the slowest pair (bar one, from seven: :func:`median_rank`) clears the gate, and so
        does the median slowed by the noise."""
        interval = self.interval
        return interval is not None and self.error is None and 1.0 / interval[0] < 1.0 - min_gain

    def held_by_rank(self, min_gain: float) -> bool:
        """No pair added at this rank (:func:`median_rank`) can settle what is left open: the
        interval's ends are never inside the k-th slowest and fastest pairs, and those only
        move apart as pairs are added; only the count where the rank rises
        (:func:`rank_rises_at`) can. An open verdict is held when the k-th slowest pair is
        not ``min_gain`` faster (the demo's four pairs, one at 1.00x: a fifth or a sixth pair
        could not have verified them); an imprecise claim, when those two pairs are more
        than :data:`CLAIM_PRECISION` from any median between them."""
        speedups = sorted(1.0 / r for r in self.ratios if r > 0)
        if not speedups:
            return False
        k = median_rank(len(speedups))
        low, high = speedups[k - 1], speedups[-k]
        if self.undecided(min_gain):
            return 1.0 / low >= 1.0 - min_gain
        return self.faster(min_gain) and self.imprecise() and math.sqrt(high / low) > 1.0 + CLAIM_PRECISION

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


@dataclass(frozen=True)
class Unverified:
    """The measured configuration written apart, and how to verify it."""

    path: Path
    """Where it was written (``torchboost.unverified.toml`` beside the user's file)."""
    measured: tuple[str, ...]
    """Each kept change with what the search measured of it, in words."""
    command: tuple[str, ...]
    """The ``torchboost compare`` command that verifies it end to end."""
    expected_s: float | None
    """Seconds that command is expected to take (None: the planned run's length is unknown)."""
    tune_again: tuple[str, ...] = ()
    """The ``torchboost tune --resume --budget B`` command that finishes the check instead:
    the diagnosis and the trials reused from the journal, the check given the time of the
    pairs a claim rests on; empty where not worked out."""
    tune_again_s: float | None = None
    """The most seconds ``tune_again`` takes: its --budget and the slack."""

    def words(self) -> str:
        """"the measured configuration is in torchboost.unverified.toml ...", for the verdict."""
        took = f" (about {_duration(self.expected_s)})" if self.expected_s is not None else ""
        again = (f"{shlex.join(self.tune_again)} (its trials reused: at most {_duration(self.tune_again_s)}), or with "
                 "whole runs: " if self.tune_again and self.tune_again_s is not None else "")
        return (f"measured {'; '.join(self.measured)}; written to {self.path.name}, your torchboost.toml left as "
                f"it was; verify it end to end with: {again}{shlex.join(self.command)}{took}")

    def to_dict(self) -> dict[str, Any]:
        """report.json's ``unverified``."""
        return {"path": str(self.path), "measured": list(self.measured), "command": list(self.command),
                "expected_s": self.expected_s, "tune_again": list(self.tune_again),
                "tune_again_s": self.tune_again_s}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def rank_rises_at(pairs: int) -> int:
    """The fewest pairs, more than ``pairs``, whose interval bars one more pair at each end
    (:func:`median_rank` rises): 7 from 1 to 6 pairs, 10 from 7 to 9."""
    more = pairs + 1
    while median_rank(more) <= median_rank(pairs):
        more += 1
    return more
