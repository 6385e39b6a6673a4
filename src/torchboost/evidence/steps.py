"""Summary: step-time statistics and the per-phase breakdown of an observed run.

The headline figure is the median step. The phase table, the breakdown and the rules read
the *typical* steps: those within ``OUTLIER_RATIO`` of the median either way. A few steps
slowed by another process, a collection pause or a recompile would otherwise pull every
phase's mean away from the step the headline quotes (six steps at twice the time move a
20-step mean by 30%), and make a finding of what the script does not do. The steps set
aside are counted and the report says so. A step is judged by its time less its own
checkpoint writes and output (:func:`judged_ms`): a script saving a checkpoint every 5 steps
makes every fifth step longer by its own doing, and that time, spread over the steps, is a
row of the phase table, not a slowdown to set aside; the table then adds up to the mean step,
above the median by the checkpoints' share.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from torchboost.evidence.host_lines import line_rows
from torchboost.evidence.observed import PHASES, Facts, StepRecord

__all__ = ["OUTLIER_RATIO", "Summary", "evaluation_share", "judged_ms", "line_view", "summarize", "measured_steps", "percentile",
           "typical_steps", "warmup_only_words"]

OUTLIER_RATIO = 1.5
"""A measured step over this many times the median, or under the median over it, is set
aside from the phase table and the rules."""


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
    """Percent of the typical steps' time per phase (data, forward, backward, optimizer,
    checkpoint, output, other: :data:`~torchboost.evidence.observed.PHASES`); sums to 100
    (all 0.0 when no step was observed)."""
    phase_ms: dict[str, float]
    """Mean time per typical step of each phase, milliseconds: adds up to about the median
    (to the mean where checkpoint writes lengthen some steps: they are spread over all)."""
    samples_per_s: float | None
    """loader batch size x steps / measured seconds; None when the batch size is unknown."""
    steps_set_aside: int = 0
    """Measured steps left out of ``phase_ms`` and ``breakdown_pct``: more than
    :data:`OUTLIER_RATIO` from the median step."""
    evaluation_ms: float = 0.0
    """Evaluation run between the measured steps (``StepRecord.eval_ms``), milliseconds in
    all: outside every step's time and phase."""
    evaluation_pct: float = 0.0
    """That time's share of the measured span (evaluation and the steps' time), percent."""
    evaluation_passes: int = 0
    """Measured steps whose span held evaluation."""

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
        "checkpoint": step.checkpoint_ms,
        "output": step.output_ms,
    }
    # Phases can overlap the step's own timer by a hair; the step then spans what was seen.
    span = max(step.total_ms, sum(known.values()))
    return {**known, "other": span - sum(known.values())}


def judged_ms(step: StepRecord) -> float:
    """What a step is judged typical by: its time less its own checkpoint writes and output,
    milliseconds (the script's periodic work is its own, not another process's slowdown)."""
    return step.total_ms - step.checkpoint_ms - step.output_ms


def typical_steps(steps: list[StepRecord]) -> list[StepRecord]:
    """The steps within :data:`OUTLIER_RATIO` of the median step either way, each judged by
    :func:`judged_ms` (every step when that would leave none)."""
    if not steps:
        return []
    median = percentile([judged_ms(s) for s in steps], 50)
    typical = [s for s in steps if median / OUTLIER_RATIO <= judged_ms(s) <= median * OUTLIER_RATIO]
    return typical or list(steps)


def summarize(facts: Facts) -> Summary:
    """Median, p90 and mean step time over the measured steps and the per-phase breakdown of
    the typical ones (:func:`typical_steps`); plain arithmetic, no plots."""
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
    typical = typical_steps(steps)
    sums = {p: 0.0 for p in PHASES}
    for step in typical:
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
        phase_ms={p: sums[p] / len(typical) for p in PHASES},
        samples_per_s=(batch * len(steps) / total_s) if batch and total_s > 0 else None,
        steps_set_aside=len(steps) - len(typical),
        **_evaluation(steps),
    )


def _evaluation(steps: list[StepRecord]) -> dict[str, Any]:
    """The evaluation fields of :class:`Summary` over ``steps``."""
    spent = sum(s.eval_ms for s in steps)
    span = spent + sum(s.total_ms for s in steps)
    return {"evaluation_ms": spent, "evaluation_pct": 100.0 * spent / span if span > 0 else 0.0,
            "evaluation_passes": sum(1 for s in steps if s.eval_ms > 0)}


def warmup_only_words(steps_seen: int, warmup: int) -> str:
    """A run that ended within its warm-up, in words: the doctor and tune say it alike."""
    return (f"the script ended after {steps_seen} training step{'s' if steps_seen != 1 else ''}, all within the "
            f"{warmup} warm-up steps; nothing was recorded. Lower --warmup (or give the script more steps)")


def line_view(facts: Facts) -> tuple[list[dict[str, Any]], float]:
    """The user's sampled lines as rows over the typical steps (:func:`typical_steps`, as the
    phase table), with the mean typical step they are a share of, milliseconds. A phase's
    lines are scaled down, together, where sampling gave them more than the phase's own
    measured time (the sampler's looks straddle a boundary now and then), so that they add
    up to at most their row. ([], 0.0) when the lines were not sampled."""
    host = facts.host
    steps = typical_steps(measured_steps(facts))
    if host is None or not host.lines or not steps:
        return [], 0.0
    step_ms = sum(s.total_ms for s in steps) / len(steps)
    rows = line_rows(host.lines, [s.index for s in steps], step_ms, share_pct=0.0)
    times = [_phase_times(s) for s in steps]
    phase_ms = {p: sum(t[p] for t in times) / len(steps) for p in PHASES}
    for bucket in PHASES:
        sampled = sum(row["ms"] for row in rows if row["bucket"] == bucket)
        if sampled > phase_ms[bucket] > 0:
            scale = phase_ms[bucket] / sampled
            for row in rows:
                if row["bucket"] == bucket:
                    row["ms"] *= scale
                    row["pct"] *= scale
    return [row for row in rows if row["ms"] > 0], step_ms


def evaluation_share(facts: Facts) -> dict[str, Any] | None:
    """The evaluation over the measured steps: ``{"eval_ms", "steps_ms", "pct", "passes",
    "every", "per_pass_ms", "where"}`` (``where``: its top sampled line, "" unknown);
    None when no evaluation ran in them."""
    steps = measured_steps(facts)
    passes = [s for s in steps if s.eval_ms > 0]
    if not passes:
        return None
    eval_ms = sum(s.eval_ms for s in passes)
    steps_ms = sum(s.total_ms for s in steps)
    rows, _ = line_view(facts)
    top = next((row for row in rows if row["bucket"] == "evaluation"), None)
    where = "" if top is None else (top["via"] or top["where"])
    return {"eval_ms": eval_ms, "steps_ms": steps_ms, "pct": 100.0 * eval_ms / (eval_ms + steps_ms),
            "passes": len(passes), "every": max(1, round(len(steps) / len(passes))),
            "per_pass_ms": eval_ms / len(passes), "where": where}
