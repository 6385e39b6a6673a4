"""How long a tuning trial runs: its measured steps, from the baseline's pace.

An ordinary trial measures about ``TRIAL_WINDOW_S`` of steps (at least ``MIN_TRIAL_STEPS``:
a loader's prefetch queue drains within fewer, and its draining would pass for speed); a
trial may stop sooner once its steps decide (:mod:`torchboost.observe.record.sequential_stop`).
A burst trial records ``BURST_TRIAL_STEPS`` and then times its bursts
(:mod:`torchboost.tune.bursts`).
"""

from __future__ import annotations

import math

__all__ = ["MIN_TRIAL_STEPS", "MAX_TRIAL_STEPS", "TRIAL_WINDOW_S", "BURST_TRIAL_STEPS", "auto_trial_steps"]

MIN_TRIAL_STEPS = 30
"""Fewest measured steps per trial: many more than a loader's prefetch queue, whose
draining would otherwise pass for speed."""
MAX_TRIAL_STEPS = 1000
TRIAL_WINDOW_S = 1.5
"""Measured time per trial that ``auto`` aims at, at the baseline's speed: 30 steps of
1 ms are 30 ms, where a single hiccup of the machine moves the mean by 10%."""


def auto_trial_steps(step_ms: float | None, *, planned_steps: int | None = None, warmup: int = 5) -> int:
    """Measured steps per trial: about ``TRIAL_WINDOW_S`` of the baseline's steps, at least
    ``MIN_TRIAL_STEPS``, at most ``MAX_TRIAL_STEPS`` and what the script runs after warm-up."""
    if not step_ms or step_ms <= 0 or not math.isfinite(step_ms):
        return MIN_TRIAL_STEPS
    steps = min(MAX_TRIAL_STEPS, max(MIN_TRIAL_STEPS, math.ceil(TRIAL_WINDOW_S * 1e3 / step_ms)))
    if planned_steps is not None:
        steps = max(MIN_TRIAL_STEPS, min(steps, planned_steps - warmup))
    return steps


BURST_TRIAL_STEPS = 2
"""Steps a burst trial records before its bursts (:mod:`torchboost.tune.bursts`): its figures
are the bursts'."""
