"""The host's calls outside the loop's phases, on the recorder's side: whether the step owns
one, its time into the step's accumulators, and what it leaves beside its time (each
checkpoint write's step, time and bytes; the recorded steps' output calls).

The hooks that time them are :mod:`torchboost.observe.hooks.host_calls`; their time per step
goes into the step's accumulators like any phase's
(:class:`~torchboost.observe.record.step_timing.StepTiming`).
"""

from __future__ import annotations

from typing import Callable

import torch

from torchboost.evidence.host_side import MAX_WRITES, HostFacts
from torchboost.evidence.observed import PHASES
from torchboost.observe.record.line_sampler import LineSampler
from torchboost.observe.record.phases import CHECKPOINT, PHASE_MARKS
from torchboost.observe.record.stages import RunStages
from torchboost.observe.record.step_timing import StepTiming

__all__ = ["HostLog"]


class HostLog:
    """Checkpoint writes and output as the hooks time them, and the user's lines the sampler
    finds the time in (``line_sample_ms``: its interval; None: not sampled);
    ``current()``: the recorder's phase in flight (None between phases)."""

    def __init__(self, timing: StepTiming, stages: RunStages, current: Callable[[], int | None], *,
                 line_sample_ms: float | None = None) -> None:
        self._timing, self._stages, self._current = timing, stages, current
        self._steps: list[int] = []
        self._ms: list[float] = []
        self._bytes: list[int | None] = []
        self._output_calls = 0
        self.in_call: int | None = None
        """The host call in flight (CHECKPOINT, OUTPUT), None between them."""
        self.lines = LineSampler(self.where, interval_ms=line_sample_ms) if line_sample_ms else None

    def where(self) -> str | None:
        """The phase the step is in now, by name, for the line sampler ("other" outside the
        loop's phases); None in torchboost's own bookkeeping."""
        timing = self._timing
        if timing.bookkeeping:
            return None
        if timing.evaluation.open:
            return "evaluation"
        phase = self.in_call if self.in_call is not None else self._current()
        return "other" if phase is None else PHASES[phase]

    def lines_at_boundary(self, kind: str | None) -> None:
        """At a step boundary: the sampler starts with the recorded steps (in this, the
        training thread, at the end of warm-up), keeps the step just closed when it was
        recorded (``kind``), and pauses until a recorded step comes again."""
        if self.lines is None:
            return
        timing = self._timing
        if not self.lines.started and self._stages.warmup_ends(timing.boundaries):
            self.lines.start()
        self.lines.close_step(timing.boundaries - 1, kind == "recorded", timing.window.records(timing.boundaries))

    def open(self) -> bool:
        """A host call now (a checkpoint write, output) is the step's own: outside every phase
        (one within a phase is that phase's), evaluation and torchboost's own bookkeeping."""
        timing = self._timing
        return self._current() is None and not timing.bookkeeping and not timing.evaluation.open

    def drain(self, waits: Callable[[], bool] = lambda: True) -> None:
        """Before a host call that would wait for the device anyway (``torch.save`` of CUDA
        tensors, a print of one; ``waits()`` says whether it would): on a step timed on the
        device, wait for its queued work first, untimed, so that the call is timed for itself
        and not for the device work the phases' events already hold."""
        if self._timing.cuda is not None and waits():
            torch.cuda.synchronize()  # the call would wait here itself: no sync the script lacks

    def begin(self, phase: int) -> None:
        """A host call of ``phase`` (CHECKPOINT, OUTPUT) the step owns starts: marked in the trace."""
        self.in_call = phase
        self._stages.profile.annotate(PHASE_MARKS[phase])

    def end(self, phase: int, ms: float, written: int | None = None) -> None:
        """That call ended after ``ms`` host milliseconds; ``written``: a checkpoint's bytes
        (None: unknown)."""
        timing = self._timing
        self.in_call = None
        timing.end(phase, ms)
        self._stages.profile.end_annotation()
        if phase != CHECKPOINT:
            self._output_calls += timing.window.records(timing.boundaries)  # in a recorded step
        elif len(self._steps) < MAX_WRITES:
            self._steps.append(timing.boundaries)  # the step in flight, as its record will be indexed
            self._ms.append(ms)
            self._bytes.append(written)

    def restart(self) -> None:
        """Step counting restarts: the writes noted so far were counted in other steps."""
        self._steps.clear()
        self._ms.clear()
        self._bytes.clear()
        self._output_calls = 0
        if self.lines is not None:
            self.lines.clear()

    def facts(self) -> HostFacts:
        """What was noted, as :class:`HostFacts`."""
        lines = self.lines.lines() if self.lines is not None else []
        return HostFacts(checkpoint_steps=list(self._steps), checkpoint_ms=list(self._ms),
                         checkpoint_bytes=list(self._bytes), output_calls=self._output_calls, lines=lines,
                         line_interval_ms=self.lines.interval_ms if self.lines is not None else None)
