"""The search's bookkeeping of measurements: repeats per candidate, each trial's time told to the budget, A/B pairs."""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from torchboost.config import Overlay
from torchboost.observe.spec import Bursts
from torchboost.tune.budget import TuneBudget
from torchboost.tune.search.decision import Status
from torchboost.tune.trials.trial_result import TrialResult, describe_settings

__all__ = ["Measure", "Pairs", "Runner", "Screened"]

Measure = Callable[[Overlay, int], TrialResult]
"""``measure(settings, repeat) -> TrialResult``: one trial of the script."""


class Runner:
    """Counts repeats per settings so each measurement has a stable (settings, repeat) key,
    and records each trial's seconds with the tune's ``budget``, which the search asks
    whether a trial, a pair or a burst trial still fits; a measure that takes ``limit_s`` is
    told the seconds the budget grants the trial."""

    def __init__(self, measure: Measure, budget: TuneBudget):
        self._measure = measure
        self._counts: dict[str, int] = {}
        self.budget = budget
        """tune's time (:class:`~torchboost.tune.budget.TuneBudget`): the search asks it."""
        self._takes = _keywords(measure, ("slower_than_ms", "decide", "bursts", "limit_s"))
        self._began_s = budget.elapsed_s()
        self.trials = 0
        self.burst_trials = 0
        self.max_load_pct = 0.0
        """The most of the machine other processes took during any trial so far, percent."""

    def elapsed_s(self) -> float:
        """Seconds since the search began."""
        return self.budget.elapsed_s() - self._began_s

    @property
    def takes_bursts(self) -> bool:
        """The measure can run a burst trial (:mod:`torchboost.tune.search.bursts`)."""
        return "bursts" in self._takes

    def __call__(self, settings: Overlay, *, slower_than_ms: float | None = None,
                 decide: tuple[float, float] | None = None, bursts: Bursts | None = None) -> TrialResult:
        """One trial. A measure that takes them may stop it early: ``slower_than_ms`` once its
        first steps are already slower than that; ``decide`` = (the incumbent's ms/step, the
        margin) once its steps decide its ratio beyond that margin (others run it in full).
        ``bursts``: a burst trial of that change on top of ``settings`` (see :attr:`takes_bursts`)."""
        key = describe_settings(settings) + (f" | bursts {describe_settings(bursts.change)}" if bursts else "")
        repeat = self._counts.get(key, 0)
        self._counts[key] = repeat + 1
        self.trials += 1
        limit = self.budget.grant(math.inf)
        given = {"slower_than_ms": slower_than_ms, "decide": decide, "bursts": bursts,
                 "limit_s": limit if math.isfinite(limit) else None}
        stops = {name: value for name, value in given.items() if value is not None and name in self._takes}
        began = self.budget.elapsed_s()
        result = self._measure(settings, repeat, **stops)
        self.budget.record(self.budget.elapsed_s() - began, burst=bursts is not None)
        self.burst_trials += bursts is not None
        self.max_load_pct = max(self.max_load_pct, result.load_pct)
        return result


def _keywords(measure: Callable[..., TrialResult], names: tuple[str, ...]) -> set[str]:
    """Which of ``names`` ``measure`` takes: each it names, or all when it takes ``**kwargs``
    (a wrapper passing its keywords on, as tune's coverage notes do)."""
    try:
        parameters = inspect.signature(measure).parameters
    except (TypeError, ValueError):  # a callable whose signature cannot be read
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return set(names)
    return {name for name in names if name in parameters}


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
