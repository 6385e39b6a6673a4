"""Which steps an observed run records, and what other processes took of the machine meanwhile.

A run warms up for ``spec.warmup`` steps, then records ``spec.steps`` (all of them after the
profiler window in a full run). Both can end sooner, so that seconds-long steps cost
seconds, not minutes, and the figures are known when observation ends:

* with ``spec.settle_warmup``, warm-up ends from its second step on, once its steps took
  :data:`SETTLED_S` and the last is within :data:`SETTLED_RATIO` of the one before (first
  calls and a compile are behind);
* recording ends once the recorded steps fill ``spec.record_s``, or, with
  ``spec.precision``, once they took :data:`PRECISE_AFTER_S` and the median step is known
  within that fraction (its standard error over it); at least ``MIN_TIMED_STEPS`` either way.

Over the recorded steps it measures, from inside the script's process, the CPU other
processes used (:class:`~torchboost.env.LoadMeter` on its own process tree). :attr:`why`
says in words where and why recording ended, for the report.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

from torchboost.env import LoadMeter, tree_cpu_s
from torchboost.evidence.observed import StepRecord
from torchboost.observe.spec import MIN_TIMED_STEPS, ObserveSpec

__all__ = ["PRECISE_AFTER_S", "RecordingWindow", "SETTLED_RATIO", "SETTLED_S", "median_error"]

SETTLED_S = 3.0
"""Warm-up may end once its steps took this many seconds: fast steps keep their count."""
SETTLED_RATIO = 0.25
"""...and its last step is within this fraction of the one before."""
PRECISE_AFTER_S = 5.0
"""Recording may end on precision once its steps took this many seconds: on fast steps the
phase table keeps every step asked for."""


def median_error(ms: list[float]) -> float:
    """The median's standard error over the median, a fraction: 1.2533 x the steps' spread
    (1.4826 x their median absolute deviation: one long step does not widen it) over sqrt(n)."""
    median = statistics.median(ms)
    spread = 1.4826 * statistics.median(abs(x - median) for x in ms)
    return 1.2533 * spread / math.sqrt(len(ms)) / median if median > 0 else math.inf


class RecordingWindow:
    """The recorded span of a run: where it starts (:attr:`start`) and ends (:attr:`end`),
    why (:attr:`why`), and the load during it (:attr:`load`)."""

    def __init__(self, spec: ObserveSpec, clock: Callable[[], float] | None = None) -> None:
        self._spec = spec
        self.start = spec.warmup
        """The first recorded boundary: after ``spec.warmup`` steps, or sooner once they settled."""
        self.end = spec.warmup + spec.steps
        """The boundary that ends recording."""
        self.why = ""
        """Where and why recording ended, in words ("" until it has)."""
        self.load = LoadMeter(own=tree_cpu_s, clock=clock)
        """Other processes' share of the machine while the steps were recorded (``load.pct``)."""
        self._summed_steps, self._summed_ms = 0, 0.0  # the recorded steps' time, kept as they come

    def restart(self) -> None:
        """Step counting restarts: the window is the spec's again."""
        self.start, self.end, self.why = self._spec.warmup, self._spec.warmup + self._spec.steps, ""
        self._summed_steps, self._summed_ms = 0, 0.0

    def records(self, index: int) -> bool:
        """The step of boundary ``index`` (from 0) is recorded."""
        spec = self._spec
        return self.start <= index < self.end or (spec.full and index >= self.end + spec.profile_steps)

    def warmed(self, index: int, warmup_ms: list[float]) -> None:
        """Boundary ``index`` closed a warm-up step (``warmup_ms``: all of them so far): warm-up
        ends here when ``spec.settle_warmup`` and its steps have settled."""
        if not self._spec.settle_warmup or len(warmup_ms) < 2 or index + 1 >= self.start:
            return
        last, before = warmup_ms[-1], warmup_ms[-2]
        if sum(warmup_ms) >= SETTLED_S * 1e3 and before > 0 and abs(last / before - 1.0) <= SETTLED_RATIO:
            self.start, self.end = index + 1, index + 1 + self._spec.steps

    def begins(self, boundaries: int) -> None:
        """The next step starts after ``boundaries`` boundaries: the first recorded one starts the load's span."""
        if boundaries == self.start:
            self.load.start()

    def recorded(self, index: int, steps: list[StepRecord]) -> None:
        """Boundary ``index`` closed a recorded step (``steps``: all of them so far): the window
        ends here once they fill ``spec.record_s`` or know the median within ``spec.precision``;
        at its end the load's span ends and :attr:`why` is said."""
        spec, n = self._spec, len(steps)
        self._summed_ms += sum(s.total_ms for s in steps[self._summed_steps:])  # the new steps only, not all again
        self._summed_steps = n
        seconds = self._summed_ms / 1e3
        if not spec.full and n >= MIN_TIMED_STEPS and index + 1 < self.end:
            if spec.record_s is not None and seconds >= spec.record_s:
                self.end, self.why = index + 1, f"{n} steps in {seconds:.1f} s, the time bound of {spec.record_s:g} s"
            elif spec.precision is not None and seconds >= PRECISE_AFTER_S:
                error = median_error([s.total_ms for s in steps])  # only once the time allows ending on it
                if error <= spec.precision:
                    self.end = index + 1
                    self.why = f"{n} steps in {seconds:.1f} s: the median step known within {error:.1%}"
        if index + 1 == self.end:
            self.why = self.why or f"{n} steps in {seconds:.1f} s, as asked"
            self.load.stop()
