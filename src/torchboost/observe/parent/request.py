"""One observed run, asked for: what to run, how long to observe it, how it may stop.

:func:`~torchboost.observe.parent.supervise.run_observed` takes a :class:`RunRequest`: the
doctor's run (profiled, echoed, bounded by steps or ``record_s``), a tuning trial (a
configuration applied, no profiler window, stopped early once slower or decided; a burst
trial's switches are in its plan),
an end-to-end check's capped run. What varies between them is data here, not sixteen
keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from torchboost.plan import Plan
from torchboost.usage import UsageError

__all__ = ["DOCTOR_PRECISION", "DOCTOR_RECORD_S", "DOCTOR_STEPS", "DOCTOR_WARMUP", "doctor_bounds", "RunRequest"]


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """One observed run of ``command``; seconds and steps as named."""

    command: Sequence[str]
    steps: int = 20
    """Recorded steps after ``warmup`` unrecorded ones."""
    warmup: int = 5
    out_dir: Path | str = "torchboost-doctor"
    full: bool = False
    """Let the script run to its end, recording every step after warm-up (its writes stay)."""
    record_s: float | None = None
    """Recording ends once its steps took this long (at least ``MIN_TIMED_STEPS`` of them)."""
    precision: float | None = None
    """Recording ends once the median step is known within this fraction (``ObserveSpec.precision``)."""
    settle_warmup: bool = False
    """Warm-up ends as soon as its steps settled (``warmup`` is then its most)."""
    apply: Plan | None = None
    """A trial's plan, resolved once by whoever asks for the run (it reaches the child whole,
    through :mod:`torchboost.handover`: written once, read once), a burst trial's switches
    included (:attr:`Plan.bursts`)."""
    profile: bool = True
    """A profiler window after the recorded steps (the doctor's); False for trials."""
    echo: bool = True
    """The child's output on the terminal; False keeps it off (stderr's tail is still kept)."""
    timeout_s: float | None = None
    """The child is killed after this long, and the run says ``timed_out``."""
    stall_timeout_s: float | None = 60.0
    """No step for this long (or 20 median steps) ends the run as stalled (exit 124)."""
    writes_ledger: Path | None = None
    """Where many runs sum what the script wrote in the user's folders."""
    stop_slower_than_ms: float | None = None
    """A trial stops once its first steps are slower than this each."""
    stop_decided: tuple[float, float] | None = None
    """(the incumbent's ms/step, the margin): a trial stops once its steps decide its ratio."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise UsageError(f"--steps must be at least 1, got {self.steps}")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be 0 or more, got {self.warmup}")

    def spec_fields(self) -> dict[str, Any]:
        """The :class:`~torchboost.observe.spec.ObserveSpec` fields this request decides."""
        fields: dict[str, Any] = {"steps": self.steps, "warmup": self.warmup, "full": self.full,
                                  "record_s": self.record_s, "precision": self.precision,
                                  "settle_warmup": self.settle_warmup, "stop_slower_than_ms": self.stop_slower_than_ms,
                                  "stall_timeout_s": self.stall_timeout_s, "command": list(self.command)}
        if not self.profile:
            fields.update(profile_warmup=0, profile_active=0, line_sample_ms=None)
        if self.stop_decided is not None:
            fields.update(stop_decided_ms=self.stop_decided[0], stop_decided_margin=self.stop_decided[1])
        return fields


DOCTOR_STEPS, DOCTOR_WARMUP = 20, 5
"""The most steps the doctor records and warms up for, unless asked for exactly."""
DOCTOR_PRECISION = 0.05
"""Recording ends once the median step is known within this fraction (after a few seconds)."""
DOCTOR_RECORD_S = 30.0
"""...or once this many seconds of steps are recorded (at least six)."""


def doctor_bounds(steps: int | None, warmup: int | None, *, full: bool = False) -> dict[str, Any]:
    """The doctor's step counts and how observation may end early, as :class:`RunRequest`
    fields (the command's and ``torchboost.doctor``'s alike): ``steps`` and ``warmup``
    exactly when given, else at most :data:`DOCTOR_STEPS` and :data:`DOCTOR_WARMUP`, fewer
    once the median is known or the warm-up settled (nothing ends early with ``full``)."""
    bounds: dict[str, Any] = {"steps": DOCTOR_STEPS if steps is None else steps,
                              "warmup": DOCTOR_WARMUP if warmup is None else warmup, "full": full}
    if full:
        return bounds
    bounds["settle_warmup"] = warmup is None
    if steps is None:
        bounds.update(precision=DOCTOR_PRECISION, record_s=DOCTOR_RECORD_S)
    return bounds
