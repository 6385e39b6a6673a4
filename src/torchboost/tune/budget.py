"""tune's time, owned in one place: what the diagnosis, each trial, a burst or a pair, and
the end-to-end check may spend.

A tune ends within ``--budget`` x (1 + :data:`BUDGET_SLACK`). The budget object is made once,
from ``--budget`` and the seconds already spent (the process's start, a doctor run before
the search); the baseline's pace then prices the check's reserve, kept before the end. Every
other part of ``tune/`` asks it: whether a trial, a pair or a burst trial still fits, how long
a trial or a run of the check may take. What it grants is what a part may spend, so the sum
cannot overrun: each part priced its own work against the clock before, and the sum did (a
``--budget 60`` tune took 95.8 s). This is the one module of ``tune/`` that compares the clock
with an end.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

import psutil

__all__ = ["BUDGET_SLACK", "CHECK_SHARE", "ENDING_S", "TuneBudget", "process_age_s"]


BUDGET_SLACK = 0.5
"""The whole tune, diagnosis, search and end-to-end check together, ends within
``--budget`` x (1 + this): the diagnosis and the search share the budget, the check has
what is left of the slack."""

CHECK_SHARE = 0.5
"""The most of the whole tune's time the end-to-end check may take. A check given less than
was reserved for it (it had --budget x 0.5, the reserve half of 1.5x) ran three of the four
pairs kept for it on a 1 s-step transformer."""

ENDING_S = 3.0
"""Seconds kept after the check, at most a twentieth of the whole: the configuration, the
report (its plots) and the machine's peak written once the runs are over. Without it a
``--budget 40`` tune whose check ran to its end finished 4 s past 1.5x."""


def process_age_s() -> float:
    """Seconds since this process started (its interpreter and imports: part of what the
    user waits for, and of what ``--budget`` promises); 0 when it cannot be read."""
    try:
        return max(0.0, time.time() - psutil.Process().create_time())
    except (psutil.Error, OSError):
        return 0.0


class TuneBudget:
    """The deadline, the time kept for the check and the ending, and the price of a trial,
    burst trial or pair (the median of those run so far), on an injected ``clock``.

    ``budget_s``: no trial starts after it (a trial finishing a decision already measured
    may); ``whole_s``: the tune ends by then (default ``budget_s`` x (1 + slack)), all in
    seconds from the start, ``spent_s`` before the object was made. ``check_most_s``: the
    check's time at most (default :data:`CHECK_SHARE` of the whole); ``ending_s``: seconds
    kept after the check (:data:`ENDING_S`)."""

    def __init__(self, budget_s: float, *, whole_s: float | None = None, clock: Callable[[], float] = time.monotonic,
                 spent_s: float = 0.0, check_most_s: float | None = None, ending_s: float = 0.0):
        self.budget_s = budget_s
        self.whole_s = budget_s * (1 + BUDGET_SLACK) if whole_s is None else whole_s
        most = self.whole_s * CHECK_SHARE
        self.check_most_s = most if check_most_s is None else min(most, check_most_s)
        """The most the end-to-end check may take, seconds (its reserve is at most this)."""
        self.ending_s = min(ending_s, self.whole_s / 20) if math.isfinite(self.whole_s) else ending_s
        self._clock = clock
        self._start = clock() - max(spent_s, 0.0)
        self._reserve_s = 0.0
        self._trials_s: list[float] = []
        self._bursts_s: list[float] = []

    def elapsed_s(self) -> float:
        """Seconds since the start (what was spent before the object was made included)."""
        return self._clock() - self._start

    def left_s(self) -> float:
        """Seconds left before the time kept for the ending (0 when none)."""
        return max(0.0, self.whole_s - self.ending_s - self.elapsed_s())

    def search_s(self) -> float:
        """Seconds of ``budget_s`` the search still has to start trials in."""
        return max(0.0, self.budget_s - self.elapsed_s())

    def keep_for_check(self, seconds: float) -> None:
        """Keep ``seconds`` (at most :attr:`check_most_s`) before the ending for the end-to-end
        check, priced at the pace so far: no trial is granted any of it."""
        self._reserve_s = min(max(0.0, seconds), self.check_most_s)

    @property
    def check_reserve_s(self) -> float:
        """Seconds kept for the end-to-end check (:meth:`keep_for_check`)."""
        return self._reserve_s

    def record(self, seconds: float, *, burst: bool = False) -> None:
        """A trial took ``seconds`` (``burst``: a burst trial): the prices follow them."""
        (self._bursts_s if burst else self._trials_s).append(max(0.0, seconds))

    @property
    def spent_s(self) -> dict[str, float]:
        """Seconds the trials recorded took: burst trials ("bursts") and the others ("trials")."""
        return {"bursts": sum(self._bursts_s), "trials": sum(self._trials_s)}

    def affords(self, price_s: float, *, finishing: bool = False) -> bool:
        """Work priced ``price_s`` may start: ``budget_s`` is not spent (``finishing``: work
        completing a decision already measured may start past it), and it ends before the
        time kept for the check and the ending."""
        elapsed = self.elapsed_s()
        if elapsed >= self.budget_s and not finishing:
            return False
        return elapsed + price_s <= self.whole_s - self.ending_s - self._reserve_s

    def affords_trial(self, expected_s: float | None = None, *, finishing: bool = False) -> bool:
        """A trial fits: as long as ``expected_s`` (its own length, as planned), else as the
        typical trial so far (the median, burst trials apart)."""
        return self.affords(self._typical(self._trials_s) if expected_s is None else expected_s, finishing=finishing)

    def affords_pair(self) -> bool:
        """A pair (two trials, each as long as the typical one) fits."""
        return self.affords(2 * self._typical(self._trials_s))

    def affords_burst(self, planned_s: float) -> bool:
        """A burst trial fits: as long as the typical burst trial, or, before any ran, as
        ``planned_s`` (no ordinary trial is like one)."""
        return self.affords(self._typical(self._bursts_s) if self._bursts_s else planned_s)

    def grant(self, wanted_s: float) -> float:
        """The seconds a trial (or a run of the check) wanting ``wanted_s`` may take: what is
        left before the time kept for the check and the ending, at most; 0 when nothing is."""
        return max(0.0, min(wanted_s, self.whole_s - self.ending_s - self._reserve_s - self.elapsed_s()))

    def for_check(self) -> TuneBudget:
        """The end-to-end check's own budget, from now: :attr:`check_most_s`, or what is left
        before the ending when less (the search's reserve given back to it)."""
        granted = min(self.check_most_s, self.left_s())
        return TuneBudget(granted, whole_s=granted, clock=self._clock, check_most_s=0.0)

    @staticmethod
    def _typical(durations: list[float]) -> float:
        return statistics.median(durations) if durations else 0.0
