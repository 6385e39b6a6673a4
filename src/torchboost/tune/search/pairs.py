"""The search's bookkeeping of measurements: repeats per candidate, the budget, A/B pairs."""

from __future__ import annotations

import inspect
import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from torchboost.config import Overlay
from torchboost.observe.spec import Bursts
from torchboost.tune.search.decision import Status
from torchboost.tune.trials.trial_result import TrialResult, describe_settings

__all__ = ["Measure", "Pairs", "Runner", "Screened"]

Measure = Callable[[Overlay, int], TrialResult]
"""``measure(settings, repeat) -> TrialResult``: one trial of the script."""


class Runner:
    """Counts repeats per settings so each measurement has a stable (settings, repeat) key,
    and keeps the search within its budget: no trial starts after ``budget_s``, nor one that
    would run into the time kept for what comes after the search (:meth:`keep_back`), and a
    measure that takes ``limit_s`` is told the seconds left before that time, so that no
    trial runs into it either."""

    def __init__(self, measure: Measure, budget_s: float, clock: Callable[[], float],
                 deadline_s: float | None = None):
        self._measure = measure
        self._counts: dict[str, int] = {}
        self._budget_s = budget_s
        self._deadline_s = deadline_s
        self._kept_back_s = 0.0
        self._takes = _keywords(measure, ("slower_than_ms", "decide", "bursts", "limit_s"))
        self._clock = clock
        self.start = clock()
        self.trials = 0
        self.durations_s: list[float] = []
        """Seconds each trial took, in order."""
        self.burst_durations_s: list[float] = []
        """Seconds each burst trial took (also in ``durations_s``), in order."""
        self.max_load_pct = 0.0
        """The most of the machine other processes took during any trial so far, percent."""

    def keep_back(self, seconds: float) -> None:
        """Keep the last ``seconds`` before the deadline for after the search (the end-to-end
        check): no trial that would run into them starts."""
        self._kept_back_s = max(0.0, seconds)

    @property
    def kept_back_s(self) -> float:
        """Seconds kept for after the search (:meth:`keep_back`)."""
        return self._kept_back_s

    @property
    def search_end_s(self) -> float:
        """Seconds from the start by which the search's trials must have ended (inf: none)."""
        return math.inf if self._deadline_s is None else self._deadline_s - self._kept_back_s

    def out_of_budget(self, trials: int = 1, *, bursts: bool = False, expected_s: float | None = None,
                      finishing: bool = False) -> bool:
        """No further trial starts: the budget is spent, or ``trials`` trials as long as the
        typical one so far (a pair: two; ``bursts``: the typical burst trial where one ran)
        would run into the time kept back; ``expected_s``: the trial's own length, as planned,
        in place of the typical one (for a burst trial, only before any ran). ``finishing``: a
        trial that completes a decision already measured (a switch's own run after its bursts
        decided it faster) may start past ``budget_s``, never into the time kept back."""
        elapsed = self._clock() - self.start
        kind = self.burst_durations_s if bursts and self.burst_durations_s else self.durations_s
        typical = statistics.median(kind) if kind else 0.0
        if expected_s is not None and not (bursts and self.burst_durations_s):
            typical = expected_s  # its own length: a burst trial, a faster candidate's run, is no typical trial
        return (elapsed >= self._budget_s and not finishing) or elapsed + trials * typical > self.search_end_s

    def elapsed_s(self) -> float:
        return self._clock() - self.start

    @property
    def spent_s(self) -> dict[str, float]:
        """Seconds the search's trials took: burst trials ("bursts") and the others ("trials")."""
        bursts = sum(self.burst_durations_s)
        return {"bursts": bursts, "trials": sum(self.durations_s) - bursts}

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
        left = self.search_end_s - self.elapsed_s()
        given = {"slower_than_ms": slower_than_ms, "decide": decide, "bursts": bursts,
                 "limit_s": left if math.isfinite(left) else None}
        stops = {name: value for name, value in given.items() if value is not None and name in self._takes}
        began = self._clock()
        result = self._measure(settings, repeat, **stops)
        took = max(0.0, self._clock() - began)
        self.durations_s.append(took)
        if bursts is not None:
            self.burst_durations_s.append(took)
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
