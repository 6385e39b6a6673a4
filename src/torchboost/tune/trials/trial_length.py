"""How long a tuning trial runs: its measured steps, from the baseline's pace.

An ordinary trial measures about ``TRIAL_WINDOW_S`` of steps (at least ``MIN_TRIAL_STEPS``:
a loader's prefetch queue drains within fewer, and its draining would pass for speed); a
trial may stop sooner once its steps decide (:mod:`torchboost.observe.record.sequential_stop`).
A burst trial records ``BURST_TRIAL_STEPS`` and then times its bursts
(:mod:`torchboost.tune.search.bursts`).
"""

from __future__ import annotations

import math

__all__ = ["MIN_TRIAL_STEPS", "MIN_SLOW_TRIAL_STEPS", "MIN_SLOWEST_TRIAL_STEPS", "SLOW_STEP_MS", "SLOWEST_STEP_MS", "MAX_TRIAL_STEPS", "TRIAL_WINDOW_S", "BURST_TRIAL_STEPS", "auto_trial_steps",
           "least_capped_steps", "BURST_WARMUP", "CAPPED_HALF_MIN_STEPS", "CAPPED_HALF_MIN_MS", "DIAGNOSIS_RECORD_S"]

MIN_TRIAL_STEPS = 30
"""Fewest measured steps per trial: many more than a loader's prefetch queue, whose
draining would otherwise pass for speed."""
MAX_TRIAL_STEPS = 1000
TRIAL_WINDOW_S = 1.5
"""Measured time per trial that ``auto`` aims at, at the baseline's speed: 30 steps of
1 ms are 30 ms, where a single hiccup of the machine moves the mean by 10%."""


SLOW_STEP_MS = 250.0
MIN_SLOW_TRIAL_STEPS = 12
"""Steps of at least ``SLOW_STEP_MS`` that wait for no data need fewer measured steps: 12 of
them are 3 s or more, their mean's standard error a third of one step's spread, and the
median of 12 ignores up to 5 long ones; 30 steps of 1-4 s made one trial a minute or two."""


SLOWEST_STEP_MS = 2000.0
MIN_SLOWEST_TRIAL_STEPS = 8
"""Steps of at least ``SLOWEST_STEP_MS`` that wait for no data: 8 of them are 16 s or more,
and their median ignores up to 3 long ones; 12 steps of 5.5 s (nanoGPT's shape beside a busy
loop) made the baseline's trial 100 s of a 300 s budget, and bf16 was never reached."""


def auto_trial_steps(step_ms: float | None, *, planned_steps: int | None = None, warmup: int = 5,
                     data_wait_pct: float = 100.0) -> int:
    """Measured steps per trial: about ``TRIAL_WINDOW_S`` of the baseline's steps, at least
    ``MIN_TRIAL_STEPS`` (``MIN_SLOW_TRIAL_STEPS`` for steps of ``SLOW_STEP_MS`` or more whose
    time waiting for data, ``data_wait_pct`` of it, is under 5%: no loader queue to drain;
    ``MIN_SLOWEST_TRIAL_STEPS`` for such steps of ``SLOWEST_STEP_MS`` or more), at most
    ``MAX_TRIAL_STEPS`` and what the script runs after warm-up."""
    if not step_ms or step_ms <= 0 or not math.isfinite(step_ms):
        return MIN_TRIAL_STEPS
    least = MIN_TRIAL_STEPS
    if step_ms >= SLOW_STEP_MS and data_wait_pct < 5.0:
        least = MIN_SLOWEST_TRIAL_STEPS if step_ms >= SLOWEST_STEP_MS else MIN_SLOW_TRIAL_STEPS
    steps = min(MAX_TRIAL_STEPS, max(least, math.ceil(TRIAL_WINDOW_S * 1e3 / step_ms)))
    if planned_steps is not None:
        steps = max(least, min(steps, planned_steps - warmup))
    return steps


DIAGNOSIS_STEPS = 20
"""Steps tune's diagnosis records, as ``torchboost doctor`` does by default: its figures
order the search and size the trials; the baseline is a trial of its own (30 steps of 1.5 s
were 45 s of a 300 s budget)."""
DIAGNOSIS_RECORD_S = 30.0
"""Seconds of steps tune's diagnosis records at most (at least ``MIN_TIMED_STEPS`` of them):
its figures order the search and size the trials, and 20 steps of 6.5 s (nanoGPT's shape
beside a busy loop) were 130 s of a 300 s budget."""
BURST_TRIAL_STEPS = 2
"""Steps a burst trial records before its bursts (:mod:`torchboost.tune.search.bursts`): its figures
are the bursts'."""
BURST_WARMUP = 2
"""Warm-up steps of a burst trial at most: its bursts alternate on warm steps, and the first
switched step is set aside as the switch's own warm-up."""


CAPPED_HALF_MIN_STEPS = 8
CAPPED_HALF_MIN_MS = 2000.0
"""An end-to-end run stopped after a step count takes its pace from its second half: at
least this many steps and milliseconds there (the floor a trial's sequential stop keeps)."""


def least_capped_steps(step_ms: float, trial_steps: int, warmup: int) -> int:
    """Fewest steps of an end-to-end run stopped after a step count: a trial's (``trial_steps``
    after ``warmup``), or, on steps slow enough, a second half of :data:`CAPPED_HALF_MIN_STEPS`
    steps and :data:`CAPPED_HALF_MIN_MS` after ``warmup`` (a run of 1.5 s steps: 5 + 16 steps,
    not 35: on seconds-long steps a trial's count alone can outlast what --budget leaves)."""
    if not step_ms > 0 or not math.isfinite(step_ms):
        return trial_steps + warmup
    half = max(CAPPED_HALF_MIN_STEPS, math.ceil(CAPPED_HALF_MIN_MS / step_ms))
    return min(trial_steps + warmup, warmup + 2 * half)
