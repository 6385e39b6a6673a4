"""A fake script of slow steps on a fake clock, for the search's budget tests.

Each trial advances the clock by its start-up and its steps (warm-up and measured), so
the budget is spent as a real tune on seconds-long steps would spend it; no time passes.
"""

from __future__ import annotations

import itertools

from torchboost.observe.record.sequential_stop import decided
from torchboost.tune.trials.trial_result import TrialResult

LOSSES = [2.0 - 0.01 * i for i in range(40)]


class SlowScript:
    """Steps of ``step_ms`` x each setting's factor; a little deterministic noise per trial."""

    def __init__(self, step_ms=4000.0, factors=None, steps=30, warmup=5, fixed_s=10.0, noise=0.02, load_pct=0.0):
        self.step_ms, self.factors, self.steps, self.warmup, self.fixed_s = step_ms, factors or {}, steps, warmup, fixed_s
        self.load_pct = load_pct
        """Other processes' share of the machine each trial reports (percent)."""
        self.now = 0.0
        self.calls: list[tuple[dict, int, float]] = []
        """(settings, repeat, the clock when the trial started)."""
        self._noise = itertools.cycle([1.0, 1.0 + noise, 1.0 - noise, 1.0 + noise / 2])

    def clock(self) -> float:
        return self.now

    def trial_ms(self, settings) -> float:
        ms = self.step_ms
        for key, value in settings.items():
            ms *= self.factors.get((key, value), 1.0)
        return ms * next(self._noise)

    def __call__(self, settings, repeat, **_):
        return self.measure(settings, repeat)

    def measure(self, settings, repeat, decide=None, **_):
        """One trial; with ``decide`` (the incumbent's ms/step, the margin) it stops once its
        steps (a little noise each) decide the ratio, as the trial's child does."""
        self.calls.append((dict(settings), repeat, self.now))
        ms = self.trial_ms(settings)
        steps = [ms * (1 + 0.01 * ((i * 7) % 5 - 2)) for i in range(self.steps)]
        if decide is not None:
            n = next((n for n in range(1, self.steps) if decided(steps[:n], *decide)), self.steps)
            steps = steps[:n]
        wall_s = self.fixed_s + (self.warmup * ms + sum(steps)) / 1e3
        self.now += wall_s
        losses = [x * 1.004 for x in LOSSES] if settings.get("precision.mode") == "bf16" else list(LOSSES)
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=steps, losses=losses[:self.warmup + len(steps)],
                           samples_per_step=16, wall_s=wall_s, fixed_s=self.fixed_s, load_pct=self.load_pct,
                           stopped_decided=decided(steps, *decide) if decide else None)

    def first_call(self, key: str) -> float | None:
        """The clock when the first trial setting ``key`` started (None: never tried)."""
        return next((t for s, _, t in self.calls if key in s), None)
