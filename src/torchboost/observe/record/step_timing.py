"""A step's phase times and its boundaries: what each closed step was, and when to stop early.

Host times come from the recorder's clock; on CUDA the phases are timed with CUDA events
(:class:`~torchboost.observe.record.cuda_phases.CudaPhases`) and :meth:`StepTiming.close_step`
calls ``torch.cuda.synchronize()``, the one sync per step (see
:mod:`torchboost.observe.record.recorder`), except in the profiler's window, whose steps are
timed on the host alone (:meth:`StepTiming.next_step`);
:meth:`~torchboost.observe.record.host_log.HostLog.drain` adds one only before a host call
that waits for the device anyway.
"""

from __future__ import annotations

import statistics
from typing import Callable

import torch

from torchboost.evidence.observed import StepRecord
from torchboost.observe.record.cuda_phases import CudaPhases
from torchboost.observe.record.sequential_stop import decided
from torchboost.observe.record.evaluation import EvaluationSpan
from torchboost.observe.record.phases import (FORWARD, OPTIMIZER, PHASE_MARKS, RECORDED, SLOW_CHECK_STEPS, WARMUP,
                                              StopObserving)
from torchboost.observe.record.recording_window import RecordingWindow
from torchboost.observe.spec import ObserveSpec

__all__ = ["StepTiming"]


class StepTiming:
    """Accumulates the phases of the step in flight; closes it into a record at a boundary."""

    def __init__(self, spec: ObserveSpec, clock: Callable[[], float]) -> None:
        self._spec = spec
        self._clock = clock
        self.acc = [0.0] * len(PHASE_MARKS)
        """Milliseconds spent per phase in the current step; the hooks add to it."""
        self.steps: list[StepRecord] = []
        """The recorded steps (after warm-up; all of them in a full run)."""
        self.warmup_ms: list[float] = []
        """Total milliseconds of each warm-up step."""
        self.boundaries = 0
        """Steps completed since counting (re)started."""
        self.window = RecordingWindow(spec, clock)
        """Which steps are recorded, and the load meanwhile."""
        self.last_boundary = clock()
        """Clock at the last step boundary (or the start), or at the end of torchboost's own
        bookkeeping after it: the stall watchdog reads it."""
        self.bookkeeping = False
        """torchboost's own work at a boundary is running (the end of warm-up's probe, the
        profiler's start, which imports dynamo: seconds on a slow machine): not the script's."""
        self.stopped_slow = False
        """The trial was stopped early as far too slow (``spec.stop_slower_than_ms``)."""
        self.stopped_decided: str | None = None
        """"faster" or "slower": the trial was stopped once decided (``spec.stop_decided_ms``)."""
        self.micro_counts: list[int] = []
        """Backward passes in each recorded step (a closure's count once)."""
        self.cuda: CudaPhases | None = None
        """Device timing of the step in flight; None off CUDA."""
        self.last_ms = 0.0
        """Total time of the last step closed, kept or not, evaluation left out, milliseconds."""
        self.evaluation = EvaluationSpan(clock)
        """Evaluation in the step in flight (:mod:`~torchboost.observe.record.evaluation`)."""
        self._step_start = clock()
        self._discard_next = False
        self._micro = 0
        self._in_closure = False

    # -- within a step -----------------------------------------------------------------
    def begin(self, phase: int) -> None:
        """A phase starts (timed on the device on CUDA, unless within evaluation: its device
        time would replace the step's host time of that phase at the boundary)."""
        if self.cuda is not None and not self.evaluation.open:
            self.cuda.begin(phase)

    def end(self, phase: int, ms: float) -> None:
        """A phase ended after ``ms`` host milliseconds (within evaluation: none of the step's)."""
        if not self.evaluation.open:
            self.acc[phase] += ms
            if self.cuda is not None:
                self.cuda.end(phase)
        elif phase == FORWARD:
            self.evaluation.watch.call_ended(ms)

    def closure_begin(self) -> None:
        """``optimizer.step``'s closure starts: it counts as one micro-step however often it runs."""
        if not self._in_closure:
            self._in_closure = True
            self._micro += 1  # an optimizer re-running its closure still steps on one batch
        if self.cuda is not None:
            self.cuda.carve_begin()

    def closure_end(self) -> None:
        """The closure returned: its device time is not the optimizer's."""
        if self.cuda is not None:
            self.cuda.carve_end()

    def backward_done(self) -> None:
        """An outermost backward finished: one more micro-step, unless inside a closure."""
        if not self._in_closure:
            self._micro += 1

    # -- at a boundary -------------------------------------------------------------------
    def close_step(self) -> str | None:
        """End the step in flight; returns :data:`RECORDED`, :data:`WARMUP` or None (not kept)."""
        if self.cuda is not None:
            torch.cuda.synchronize()  # the one sync per step, see torchboost.observe.record.recorder
            self.cuda.collect(self.acc)
        eval_ms = self.evaluation.take()
        now = self._clock()
        self.last_boundary = now
        index = self.boundaries
        self.boundaries += 1
        recording = self.window.records(index)
        kind = None
        self.last_ms = max(0.0, (now - self._step_start) * 1000.0 - eval_ms)
        if recording and not self._discard_next:
            self.steps.append(StepRecord(index, self.last_ms, *self.acc, eval_ms=eval_ms))
            self.micro_counts.append(self._micro)
            kind = RECORDED
            self.window.recorded(index, self.steps)
        elif index < self.window.start and not self._discard_next:
            # Warm-up is kept apart: its extra time is the first-call (compile) cost.
            self.warmup_ms.append(self.last_ms)
            kind = WARMUP
            self.window.warmed(index, self.warmup_ms)
        self._discard_next = False
        self._micro, self._in_closure = 0, False
        self.acc[:] = [0.0] * len(self.acc)
        return kind

    def stop_if_slow(self) -> None:
        """Raise :class:`StopObserving` once the first recorded steps are far over the trial's
        bound, or once they decide its ratio to the incumbent (a sequential stop)."""
        spec = self._spec
        if spec.stop_decided_ms is not None and len(self.steps) < spec.steps:
            self.stopped_decided = decided([s.total_ms for s in self.steps], spec.stop_decided_ms,
                                           spec.stop_decided_margin)
            if self.stopped_decided is not None:
                raise StopObserving
        limit = spec.stop_slower_than_ms
        if limit is None or len(self.steps) != SLOW_CHECK_STEPS:
            return
        # The median, not the mean: one recompile among the first steps (a compiled model's
        # tail of shape guards) is not the candidate's pace; the full trial's mean judges it.
        if statistics.median(s.total_ms for s in self.steps) > limit:
            self.stopped_slow = True
            raise StopObserving

    def next_step(self, cuda: bool, *, profiling: bool = False) -> None:
        """The next step starts now (after the boundary's bookkeeping, which is no step's).
        ``cuda``: it is timed on the device, ending in a sync; not while ``profiling``: the
        profiler's steps are in no recorded figure, and a sync of ours would be in their trace
        as the script's, draining the device each step (its idle time, its sync count)."""
        self.window.begins(self.boundaries)
        timed = cuda and not profiling
        if timed and self.cuda is None:
            # The step before was not timed on the device (the first, the profiler's last):
            # its work may still run there, and is no part of this step.
            torch.cuda.synchronize()
        self.cuda = CudaPhases(OPTIMIZER) if timed else None
        self._step_start = self.last_boundary = self._clock()
        self.bookkeeping = False

    def restart(self, first_ms: float) -> None:
        """Count steps from zero again; the step in flight (cut in two) is not kept.

        ``first_ms``: the time of the first step so far, kept as the one warm-up step.
        """
        self.boundaries = 0
        self.window.restart()
        self.steps.clear()
        self.micro_counts.clear()
        self.warmup_ms[:] = [first_ms] if first_ms > 0 else []
        self._discard_next = True

    def micro_median(self) -> float | None:
        """Median micro-steps per recorded step; None when there is none."""
        return float(statistics.median(self.micro_counts)) if self.micro_counts else None


def one_rank_of_many() -> bool:
    """Whether this process is one rank of a job of several (``torch.distributed``'s default
    group up, over one process): its early stops are its own decision, taken on its own steps,
    and would not fall on the same step as its peers'; their planned end does."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
