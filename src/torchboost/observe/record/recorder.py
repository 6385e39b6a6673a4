"""Step accounting: phase times between step boundaries, the run's stages, and the facts.

The :class:`StepRecorder` is fed by the hooks in :mod:`torchboost.observe.hooks.instrument`
(which only measure and call in) and decides what a boundary means: warm-up, a
recorded step, a profiled step, or the end of observation (it raises
:class:`StopObserving`). Host times come from ``time.perf_counter``; on CUDA the
forward, backward and optimizer phases are timed with CUDA events instead and the
recorder calls ``torch.cuda.synchronize()`` once per step, at the boundary, so the
step's total includes the device work it launched (this removes the overlap of one
step's device work with the next step's host work, a cost we accept for honest
per-step numbers; no other sync is added). The profiler's steps are the exception: they
are in no recorded figure, so they are timed on the host alone and nothing of ours syncs
in them; the trace shows the script's own syncs and idle time, as it runs unobserved.

The recorder composes small parts and holds only what is the run's own (how it ended,
the observer's own errors: a :class:`~torchboost.observe.record.facts_builder.RunState`
and a list):

* :class:`~torchboost.observe.record.step_timing.StepTiming`: phase times (evaluation apart:
  :class:`~torchboost.observe.record.evaluation.TrainingSplit`), boundaries, what
  each closed step was, the early stop of a far too slow trial;
* :class:`~torchboost.observe.record.loss_capture.LossCapture`: each step's loss;
* :class:`~torchboost.observe.record.host_log.HostLog`: the checkpoint writes and output
  timed outside the phases (:mod:`torchboost.observe.hooks.host_calls` calls it directly);
* :class:`~torchboost.observe.record.script_objects.ScriptObjects`: the script's loaders, root
  modules, primary optimizer and autocast, and its settings at the end of warm-up;
* :class:`~torchboost.observe.record.stages.RunStages`: warm-up, recorded, profiled, over, and
  the profiler window;
* :func:`~torchboost.observe.record.facts_builder.build_facts`: the Facts, built from those
  parts and the run's state, with the live objects described;
  :class:`~torchboost.observe.record.facts_so_far.FactsSoFar`: the facts kept so far;
* :class:`~torchboost.observe.record.run_output.RunOutput`: a plain writer of the progress
  line, the step count and ``facts.json``.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

import torch

from torchboost.evidence.observed import Facts, StepRecord
from torchboost.handover import Claims
from torchboost.observe.probes import describe
from torchboost.observe.probes.profile import Quiet
from torchboost.observe.record.evaluation import TrainingSplit
from torchboost.observe.record.facts_builder import RecordedParts, RunState
from torchboost.observe.record.facts_so_far import FactsSoFar
from torchboost.observe.record.host_log import HostLog
from torchboost.observe.record.loss_capture import LossCapture
from torchboost.observe.record.phases import (
    BACKWARD, DATA, FORWARD, OPTIMIZER, PHASE_MARKS, RECORDED, SLOW_CHECK_STEPS, StopObserving,
)
from torchboost.observe.record.run_output import RunOutput
from torchboost.observe.record.script_objects import ScriptObjects
from torchboost.observe.spec import ObserveSpec
from torchboost.plan import Bursts
from torchboost.observe.record.stages import RunStages
from torchboost.observe.record.step_timing import StepTiming, one_rank_of_many

__all__ = ["StepRecorder", "StopObserving", "DATA", "FORWARD", "BACKWARD", "OPTIMIZER", "SLOW_CHECK_STEPS"]


class StepRecorder:
    """Turns hook calls into :class:`StepRecord` s and :class:`Facts` (see module docstring).
    ``claims``: what a Booster in the script applies itself (:mod:`torchboost.handover`), by default
    none; ``profiler_quiet``: the profiler window's ``quiet``; ``bursts``: a burst trial's, from its plan."""

    def __init__(self, spec: ObserveSpec, *, clock: Callable[[], float] = time.perf_counter, claims: Claims | None = None,
                 profiler_quiet: Quiet = contextlib.nullcontext, bursts: Bursts | None = None) -> None:
        self.spec = spec
        self.clock = clock
        self.timing = StepTiming(spec, clock)
        self.losses = LossCapture()
        self.seen = ScriptObjects(clock)
        self.stages = RunStages(spec, self.timing, self.losses, profiler_quiet=profiler_quiet, burst_trial=bool(bursts))
        self.host = HostLog(self.timing, self.stages, lambda: self.current, line_sample_ms=spec.line_sample_ms)
        self.output = RunOutput(spec, clock, self.timing.window)
        self.run = RunState()  # how steps are counted, what was applied, how the run ended
        self.current: int | None = None  # the phase now (DATA...OPTIMIZER, None between): the watchdog says it
        self.errors: list[str] = []  # the observer's own failures: recorded, never raised into the script
        self.built = FactsSoFar(RecordedParts(spec, self.timing, self.losses, self.seen, self.stages, self.run,
                                                  self.errors, self.host, bursts))
        self.on_warmup_end: list[Callable[[list[torch.nn.Module]], None]] = []  # given the roots at warm-up end
        self._claims = claims if claims is not None else Claims()
        self._claims_before = self._claims.names()
        # Hook calls that concern one part alone go straight to it: no extra call per phase.
        self.closure_begin, self.closure_end = self.timing.closure_begin, self.timing.closure_end
        self.stages.quick_start = lambda quick: self.built.start_quick(quick, self.uses_booster)
        self.split = TrainingSplit(self.timing.acc, self.timing.evaluation, self.seen, self.losses)
        self.backward_tensor = self.split.backward_on  # an outermost backward starts
        self.roots = self.seen.roots

    # -- called by the hooks -------------------------------------------------------------
    def loader_iter(self, loader: Any, iterator: Any) -> None:
        """A DataLoader made an iterator (once per epoch)."""
        self.guarded(self.split.iter, loader, iterator)

    def data_begin(self) -> None:
        """The loop asks its DataLoader for a batch."""
        self.current = DATA
        self.stages.profile.annotate(PHASE_MARKS[DATA])

    def loader_batch(self, iterator: Any, ms: float) -> None:
        """A batch was fetched from ``iterator`` after waiting ``ms`` milliseconds."""
        self.split.batch(iterator, ms)
        self.current = None
        self.phase_end(DATA, ms)

    def forward_begin(self, module: torch.nn.Module, autocast_devices: tuple[str, ...]) -> None:
        """An outermost module call starts (training's, or evaluation's: :class:`TrainingSplit`)."""
        self.split.forward(module, autocast_devices)
        self.phase_begin(FORWARD)

    def phase_begin(self, phase: int) -> None:
        """A phase starts: marked in the trace, timed on the device on CUDA."""
        self.stages.profile.annotate(PHASE_MARKS[phase])  # no string built per call: this is the hot path
        self.timing.begin(phase)

    def phase_end(self, phase: int, ms: float) -> None:
        """A phase ended after ``ms`` host milliseconds."""
        self.timing.end(phase, ms)
        self.stages.profile.end_annotation()

    def backward_done(self) -> None:
        """An outermost backward finished: a step boundary when no optimizer steps."""
        self.timing.backward_done()
        if not self.seen.has_primary:
            self.boundary()

    def optimizer_begin(self, optimizer: torch.optim.Optimizer) -> None:
        """An outermost ``optimizer.step`` starts."""
        if not self.seen.has_primary:
            self._adopt_optimizer(optimizer)
        self.phase_begin(OPTIMIZER)

    def optimizer_done(self, optimizer: torch.optim.Optimizer) -> None:
        """An outermost ``optimizer.step`` finished: the primary optimizer's marks a boundary."""
        if self.seen.stepped(optimizer):
            self.boundary()

    # -- read by the tests and the facts (the watchdog reads ``timing``) ------------------
    @property
    def steps(self) -> list[StepRecord]:
        """The recorded steps so far."""
        return self.timing.steps

    @property
    def stopped_slow(self) -> bool:
        """The trial was stopped early as far too slow (``spec.stop_slower_than_ms``)."""
        return self.timing.stopped_slow

    @property
    def uses_booster(self) -> bool:
        """A Booster in the script claimed techniques since the recorder was made."""
        return self._claims.names() > self._claims_before

    # -- boundaries and facts --------------------------------------------------------------
    def boundary(self) -> None:
        """End the current step; may start/drive the profiler or raise :class:`StopObserving`."""
        timing = self.timing
        kind = timing.close_step()
        timing.bookkeeping = True  # until next_step: torchboost's time, not the script's
        self.losses.close_step(kind, timing.boundaries - 1)
        if kind == RECORDED and not one_rank_of_many():  # a rank stopped early: its peers would wait
            timing.stop_if_slow()
        done = timing.boundaries
        if self.stages.warmup_ends(done):
            self.guarded(self.built.at_warmup_end, self.uses_booster)
            for callback in self.on_warmup_end:
                self.guarded(callback, self.roots())
        self.guarded(self.host.lines_at_boundary, kind)  # the line sampler: started, kept, paused
        self.guarded(self.output.after_boundary, done, steps=len(timing.steps),  # before the profiler: not profiled
                     profiling=self.stages.profile.running, write_facts=self.write_facts)
        if self.stages.advance(done, self._uses_cuda):
            self.run.ended = "stopped"
            raise StopObserving
        timing.next_step(self._uses_cuda(), profiling=self.stages.profile.running)  # after our bookkeeping

    def facts(self) -> Facts:
        """Everything seen so far, as :class:`Facts` (converts pending losses: may sync)."""
        return self.built.facts(self.uses_booster)

    def write_facts(self, exit_code: int | None = None) -> Facts:
        """Rewrite facts.json atomically; returns it. ``exit_code``: given at the run's end only."""
        facts = self.built.for_writing(self.uses_booster, exit_code)
        self.output.write_facts(facts)
        return facts

    def guarded(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Call ``fn``; a failure goes to :attr:`errors` (and the facts), never into the script."""
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the observer must never break the user's run
            self.errors.append(f"{getattr(fn, '__name__', 'observer')}: {type(exc).__name__}: {exc}")

    def _adopt_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        # Boundaries were backward calls: count optimizer steps now (the step in flight is not recorded).
        self.seen.adopt_optimizer(optimizer)
        self.guarded(self.seen.look_for_trainer)
        self.run.step_source = "optimizer"
        self.losses.scaler = describe.find_grad_scaler(max_depth=16)  # searched from this frame up
        if self.timing.boundaries:
            # The first step's forward and backward, up to this optimizer step, stay in the warm-up: a model
            # compiled before training (a Booster's) compiles right there, the time the tuner weighs against its gain.
            first = self.seen.first_forward_at
            self.timing.restart((self.clock() - first) * 1000.0 if first else 0.0)
            self.losses.restart()
            self.host.restart()
            self.stages.restart()

    def _uses_cuda(self) -> bool:
        return self.built.uses_cuda()
