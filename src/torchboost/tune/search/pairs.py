"""The search's bookkeeping of measurements: repeats per candidate, each trial's time told to the budget, A/B pairs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from torchboost.config import Overlay
from torchboost.plan import Bursts
from torchboost.tune.budget import TuneBudget
from torchboost.tune.search.decision import Status
from torchboost.tune.trials.trial_result import TrialResult, describe_settings

__all__ = ["Measure", "Pairs", "Runner", "Screened"]

class Measure(Protocol):
    """One trial of the script: ``measure(settings, repeat, *, slower_than_ms, decide, bursts,
    limit_s) -> TrialResult``, ``repeat`` counting the runs of the same ``settings``.

    The search passes every keyword, None where it asks nothing of it: ``slower_than_ms``,
    stop once the first steps are slower than that each; ``decide`` = (the incumbent's
    ms/step, the margin), stop once the steps decide the ratio beyond that margin;
    ``bursts``, a burst trial of that change on top of ``settings`` (asked only where
    :attr:`SearchOptions.bursts <torchboost.tune.search.search_options.SearchOptions.bursts>`
    says the measure runs them); ``limit_s``, the seconds the budget grants the trial. A
    measure that cannot stop a trial early runs it in full."""

    def __call__(self, settings: Overlay, repeat: int, *, slower_than_ms: float | None,
                 decide: tuple[float, float] | None, bursts: Bursts | None, limit_s: float | None) -> TrialResult:
        ...


class Runner:
    """Counts repeats per settings so each measurement has a stable (settings, repeat) key,
    and records each trial's seconds with the tune's ``budget``, which the search asks
    whether a trial, a pair or a burst trial still fits; the measure is told the seconds the
    budget grants the trial (``limit_s``)."""

    def __init__(self, measure: Measure, budget: TuneBudget):
        self._measure = measure
        self._counts: dict[str, int] = {}
        self.budget = budget
        """tune's time (:class:`~torchboost.tune.budget.TuneBudget`): the search asks it."""
        self._began_s = budget.elapsed_s()
        self.trials = 0
        self.burst_trials = 0
        self.max_load_pct = 0.0
        """The most of the machine other processes took during any trial so far, percent."""

    def elapsed_s(self) -> float:
        """Seconds since the search began."""
        return self.budget.elapsed_s() - self._began_s

    def __call__(self, settings: Overlay, *, slower_than_ms: float | None = None,
                 decide: tuple[float, float] | None = None, bursts: Bursts | None = None) -> TrialResult:
        """One trial, the keywords passed on to the measure (:class:`Measure`)."""
        key = describe_settings(settings) + (f" | bursts {describe_settings(bursts.change)}" if bursts else "")
        repeat = self._counts.get(key, 0)
        self._counts[key] = repeat + 1
        self.trials += 1
        limit = self.budget.grant(math.inf)
        began = self.budget.elapsed_s()
        result = self._measure(settings, repeat, slower_than_ms=slower_than_ms, decide=decide, bursts=bursts,
                               limit_s=limit if math.isfinite(limit) else None)
        self.budget.record(self.budget.elapsed_s() - began, burst=bursts is not None)
        self.burst_trials += bursts is not None
        self.max_load_pct = max(self.max_load_pct, result.load_pct)
        return result


class Screened(NamedTuple):
    """A candidate that ran and kept parity in screening."""

    ms: float
    change: Overlay
    """What the candidate changes (its lever's knobs)."""
    result: TrialResult
    settings: Overlay = Overlay()
    """Everything it ran with: ``change`` on the settings kept before its lever."""


@dataclass
class Pairs:
    """The A/B pairs confirming one candidate; the first ratio is the screening one."""

    ratios: list[float]
    incumbent_ms: list[float]
    candidate_ms: list[float]
    incumbent_fixed: list[float] = field(default_factory=list)
    """Seconds each incumbent run spent outside its steps (start-up, worker start, teardown)."""
    candidate_fixed: list[float] = field(default_factory=list)
    candidate_compile: list[float] = field(default_factory=list)
    """Seconds each candidate run spent compiling (the screening run first: the cold one
    when the compile cache was empty; the pairs' runs find it warm)."""
    count: int = 0
    """Fresh pairs measured (the screening ratio is not one)."""
    failure: tuple[Status, str] | None = None
    peak_memory_bytes: int = 0
    """The highest peak memory of the candidate's runs (screening included), bytes; 0: not measured."""

    def add(self, incumbent_ms: float, candidate_ms: float, incumbent_fixed: float = 0.0,
            candidate_fixed: float = 0.0, candidate_compile: float = 0.0) -> None:
        self.count += 1
        self.candidate_compile.append(candidate_compile)
        self.incumbent_ms.append(incumbent_ms)
        self.candidate_ms.append(candidate_ms)
        self.ratios.append(candidate_ms / incumbent_ms)
        self.incumbent_fixed.append(incumbent_fixed)
        self.candidate_fixed.append(candidate_fixed)

    def compile_costs(self) -> tuple[float, float]:
        """(the first run's compile seconds, every later run's): cold then warm when the
        screening run filled the compile cache; the same figure twice with one run."""
        first = self.candidate_compile[0] if self.candidate_compile else 0.0
        later = sorted(self.candidate_compile[1:])
        return first, later[len(later) // 2] if later else first

    def settled(self, clear_pairs: int, threshold: float) -> bool:
        """The last ``clear_pairs`` ratios (after one fresh pair at least) agree on the verdict."""
        recent = self.ratios[-clear_pairs:]
        return bool(self.count) and len(recent) == clear_pairs and (
            all(r < threshold for r in recent) or all(r >= threshold for r in recent))
