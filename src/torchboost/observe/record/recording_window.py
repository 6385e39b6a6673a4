"""Which steps an observed run records, and what other processes took of the machine meanwhile.

A run records ``spec.steps`` steps after ``spec.warmup`` (all of them after the profiler
window in a full run), or fewer once the recorded steps fill ``spec.record_s`` (at least
``MIN_TIMED_STEPS`` of them): seconds-long steps then cost seconds, not minutes. Over the
same steps it measures, from inside the script's process, the CPU other processes used
(:class:`~torchboost.env.LoadMeter` on its own process tree): a busy machine's neighbours.
"""

from __future__ import annotations

from torchboost.env import LoadMeter, tree_cpu_s
from torchboost.evidence.observed import StepRecord
from torchboost.observe.spec import MIN_TIMED_STEPS, ObserveSpec

__all__ = ["RecordingWindow"]


class RecordingWindow:
    """The recorded span of a run: where it ends (:attr:`end`) and the load during it (:attr:`load`)."""

    def __init__(self, spec: ObserveSpec) -> None:
        self._spec = spec
        self.end = spec.warmup + spec.steps
        """The boundary that ends recording: after ``spec.steps`` steps, or sooner once the
        recorded steps fill ``spec.record_s``."""
        self.load = LoadMeter(own=tree_cpu_s)
        """Other processes' share of the machine while the steps were recorded (``load.pct``)."""

    def restart(self) -> None:
        """Step counting restarts: the window is the spec's again."""
        self.end = self._spec.warmup + self._spec.steps

    def records(self, index: int) -> bool:
        """The step of boundary ``index`` (from 0) is recorded."""
        spec = self._spec
        return spec.warmup <= index < self.end or (spec.full and index >= self.end + spec.profile_steps)

    def begins(self, boundaries: int) -> None:
        """The next step starts after ``boundaries`` boundaries: the first recorded one starts the load's span."""
        if boundaries == self._spec.warmup:
            self.load.start()

    def recorded(self, index: int, steps: list[StepRecord]) -> None:
        """Boundary ``index`` closed a recorded step (``steps``: all of them so far): the window
        ends here once they fill ``spec.record_s``, and at its end the load's span ends."""
        bound = self._spec.record_s
        if (bound is not None and not self._spec.full and len(steps) >= MIN_TIMED_STEPS
                and sum(s.total_ms for s in steps) >= bound * 1e3):
            self.end = min(self.end, index + 1)
        if index + 1 == self.end:
            self.load.stop()
