"""Summary: step-time statistics and the per-phase breakdown of an observed run."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from torchboost.evidence.observed import PHASES, Facts, StepRecord

__all__ = ["Summary", "summarize", "measured_steps", "percentile"]


@dataclass
class Summary:
    """Step statistics over the measured (post-warm-up) steps. Times in milliseconds."""

    steps_observed: int
    """Every step recorded, warm-up included."""
    steps_measured: int
    """Steps the statistics rest on: those with ``index >= facts.warmup_steps``
    (all of them when that would leave none)."""
    step_time_ms: dict[str, float | None]
    """{"median", "p90", "mean"} of the step time; None when no step was observed."""
    breakdown_pct: dict[str, float]
    """Percent of the total measured step time per phase (data, forward, backward,
    optimizer, other); sums to 100 (all 0.0 when no step was observed)."""
    phase_ms: dict[str, float]
    """Mean time per step of each phase, milliseconds."""
    samples_per_s: float | None
    """loader batch size x steps / measured seconds; None when the batch size is unknown."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return dataclasses.asdict(self)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def measured_steps(facts: Facts) -> list[StepRecord]:
    """The steps statistics use: warm-up steps (``index < warmup_steps``) left out.

    Keyed on the step index, so it is right whether the observer keeps warm-up records
    in ``facts.steps`` or drops them. Falls back on every step when none is past warm-up.
    """
    steady = [s for s in facts.steps if s.index >= facts.warmup_steps]
    return steady or list(facts.steps)


def _phase_times(step: StepRecord) -> dict[str, float]:
    known = {
        "data": step.data_ms,
        "forward": step.forward_ms,
        "backward": step.backward_ms,
        "optimizer": step.optimizer_ms,
    }
    # Phases can overlap the step's own timer by a hair; the step then spans what was seen.
    span = max(step.total_ms, sum(known.values()))
    return {**known, "other": span - sum(known.values())}


def summarize(facts: Facts) -> Summary:
    """Median, p90 and mean step time and the per-phase breakdown; plain arithmetic, no plots."""
    steps = measured_steps(facts)
    if not steps:
        return Summary(
            steps_observed=0,
            steps_measured=0,
            step_time_ms={"median": None, "p90": None, "mean": None},
            breakdown_pct={p: 0.0 for p in PHASES},
            phase_ms={p: 0.0 for p in PHASES},
            samples_per_s=None,
        )
    totals = [s.total_ms for s in steps]
    sums = {p: 0.0 for p in PHASES}
    for step in steps:
        for phase, ms in _phase_times(step).items():
            sums[phase] += ms
    span = sum(sums.values())
    breakdown = {p: (100.0 * sums[p] / span if span > 0 else 0.0) for p in PHASES}
    batch = facts.loader.batch_size if facts.loader else None
    total_s = sum(totals) / 1000.0
    return Summary(
        steps_observed=len(facts.steps),
        steps_measured=len(steps),
        step_time_ms={
            "median": percentile(totals, 50),
            "p90": percentile(totals, 90),
            "mean": sum(totals) / len(totals),
        },
        breakdown_pct=breakdown,
        phase_ms={p: sums[p] / len(steps) for p in PHASES},
        samples_per_s=(batch * len(steps) / total_s) if batch and total_s > 0 else None,
    )
