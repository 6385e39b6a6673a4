"""Evaluation inside the training loop, kept out of the training step.

A script that evaluates every N steps (``model.eval()``, ``torch.no_grad()`` or
``inference_mode``, a pass over a held-out loader) runs that pass between two training
steps. It is no part of either: the pass starts at the first call of a trained module
(one called with gradients on before) with gradients off, and ends when training resumes
(a call with gradients on, a backward, an optimizer step, a training loader's batch:
then where its wait began, and the step's boundary). A call in eval mode (``model.eval()``) of a module trained in train mode
before is evaluation too, gradients on or off (a script that forgot ``torch.no_grad()``):
unless a backward follows it, which makes that module one that trains in eval mode (its
BatchNorm frozen), whose calls are training from then on. Once a pass with gradients on has
ended with no backward in it, every other call of the next passes runs with gradients off,
as ``torch.no_grad()`` would have it (the same outputs: the metric is the same), and both
kinds are timed: what the graph costs the evaluation is measured, not assumed. It began where the script turned to
it: the first wait for a batch of another loader than the training one, or that loader's
``iter()``. Its time is the step's ``eval_ms``,
outside the step's total and phases (on CUDA too: its calls get no device events, whose
times would replace the phases' host times). A module only ever called with gradients off (a
distillation teacher, a frozen encoder) is part of the step.

The training loader is the one whose batches reach backward
(:meth:`~torchboost.observe.record.script_objects.ScriptObjects.reached_backward`).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import torch

from torchboost.evidence.evaluation_facts import EvaluationFacts
from torchboost.observe.record.loss_capture import LossCapture
from torchboost.observe.record.phases import DATA
from torchboost.observe.record.script_objects import ScriptObjects

__all__ = ["EvaluationSpan", "EvaluationWatch", "TrainingSplit"]


class EvaluationWatch:
    """Which calls of the trained modules are evaluation by their mode, and what the
    evaluation's calls were (:class:`~torchboost.evidence.evaluation_facts.EvaluationFacts`)."""

    def __init__(self) -> None:
        self._trained: set[int] = set()  # modules called in train mode with gradients on
        self._trains_in_eval: set[int] = set()  # modules a backward followed in eval mode
        self._opened_by: int | None = None  # the module whose eval-mode call opened the span, gradients on
        self._probe_ok = False  # a pass with gradients on ended with no backward: calls may run without
        self._probing = False  # the call in flight runs with gradients off for the measure
        self._times: dict[bool, list[float]] = {True: [], False: []}  # call ms with gradients on / off
        self.facts = EvaluationFacts()
        """The evaluation's calls, warm-up included."""

    def by_mode(self, module: torch.nn.Module) -> bool:
        """An outermost call of ``module``: True when its mode makes it evaluation (eval
        mode, gradients on, the module trained in train mode before and never in eval)."""
        key, grad = id(module), torch.is_grad_enabled()
        if module.training:
            if grad:
                self._trained.add(key)
            return False
        return grad and key in self._trained and key not in self._trains_in_eval

    def opened(self, module: torch.nn.Module, *, grad_on: bool) -> None:
        """An evaluation call of ``module`` (``grad_on``: with gradients on)."""
        self._opened_by = id(module) if grad_on else self._opened_by
        self.facts.calls += 1
        self.facts.grad_calls += int(grad_on)
        if grad_on and self._probe_ok and self.facts.grad_calls % 2 == 0:
            self._probing = True
            torch.set_grad_enabled(False)  # this call as under torch.no_grad(); back on as it ends

    def call_ended(self, ms: float) -> None:
        """An evaluation call ended after ``ms``: timed by its gradients, and put back on
        where the measure turned them off."""
        if self._opened_by is None:
            return
        if self._probing:
            torch.set_grad_enabled(True)
            self._probing = False
            self._times[False].append(ms)
        else:
            self._times[True].append(ms)
        timed = self._times
        if timed[True] and timed[False]:
            self.facts.grad_call_ms = statistics.median(timed[True])
            self.facts.no_grad_call_ms = statistics.median(timed[False])
            self.facts.timed_calls = len(timed[True]) + len(timed[False])

    def ended_without_backward(self) -> None:
        """Training resumed with no backward in the pass: its calls may be measured without gradients."""
        self._probe_ok = self._probe_ok or self._opened_by is not None

    def backward(self, span_open: bool) -> None:
        """A backward starts: where an eval-mode call with gradients on opened the span, that
        module trains in eval mode."""
        if span_open and self._opened_by is not None:
            self._trains_in_eval.add(self._opened_by)
            self._probe_ok = False
        self._opened_by = None

    def loader(self, loader: Any, training: Any) -> None:
        """The evaluation's loader and the training one: their batch sizes."""
        self.facts.batch_size = getattr(loader, "batch_size", None)
        self.facts.train_batch_size = getattr(training, "batch_size", None) if training is not None else None


class EvaluationSpan:
    """The evaluation span open in the step in flight, and the evaluation time it holds."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        """The recorder's clock, seconds."""
        self._start: float | None = None
        self.watch = EvaluationWatch()
        """Which calls are evaluation by the module's mode, and what the evaluation's were."""
        self.ms = 0.0
        """Milliseconds of evaluation in the step in flight, spans closed so far."""

    @property
    def open(self) -> bool:
        """An evaluation span is open: the phases' times are none of the step's."""
        return self._start is not None

    def begin(self, since: float | None = None) -> bool:
        """Open a span (unless one is), begun at clock ``since`` (now when None); True when
        this opened it."""
        if self._start is not None:
            return False
        self._start = self.clock() if since is None else since
        return True

    def end(self, ago_ms: float = 0.0) -> None:
        """Training resumed ``ago_ms`` milliseconds ago: the open span, if any, ends there."""
        start = self._start
        if start is not None:
            self._start = None
            self.ms += max(0.0, (self.clock() - start) * 1000.0 - ago_ms)

    def take(self) -> float:
        """At the step's boundary: close the span, return the step's evaluation time, start at 0."""
        self.end()
        spent, self.ms = self.ms, 0.0
        return spent


class TrainingSplit:
    """Tells the hooks' calls of training from evaluation's (see the module docstring) for
    the recorder; ``acc`` is the step's phase accumulator, ``span`` its evaluation span."""

    def __init__(self, acc: list[float], span: EvaluationSpan, seen: ScriptObjects, losses: LossCapture) -> None:
        self._acc, self._span, self._seen, self._losses = acc, span, seen, losses
        self.watch = span.watch
        self._since: float | None = None  # when the script turned to another loader than training's
        self._waits_ms = 0.0  # that loader's waits since, in the step's data phase until an evaluation call

    def iter(self, loader: Any, iterator: Any) -> None:
        """``loader`` made ``iterator``: an evaluation loader's (no batch of it reached
        backward, another's did) may begin an evaluation (may raise: the caller records it)."""
        if self._seen.loader_iter(loader, iterator):
            self.watch.loader(loader, self._seen.main_loader())
            self._since = self._span.clock() if self._since is None else self._since

    def batch(self, iterator: Any, ms: float) -> None:
        """``iterator`` gave a batch after ``ms``: a training loader's ends evaluation where its wait began."""
        if self._seen.loader_batch(iterator):
            if self._span.open:
                self.watch.ended_without_backward()
            self._span.end(ms)
            self._since, self._waits_ms = None, 0.0
        else:
            self._since = self._span.clock() - ms / 1000.0 if self._since is None else self._since
            self._waits_ms += ms

    def forward(self, module: torch.nn.Module, autocast_devices: tuple[str, ...]) -> None:
        """An outermost call of ``module``: an evaluation call opens a span, one with gradients on ends it."""
        grad_off = self._seen.forward(module, autocast_devices)
        if grad_off or self.watch.by_mode(module):
            self.watch.opened(module, grad_on=not grad_off)
            if self._span.begin(self._since):
                self._acc[DATA] = max(0.0, self._acc[DATA] - self._waits_ms)
                self.watch.facts.passes += 1
        else:
            if self._span.open:
                self.watch.ended_without_backward()
            self._span.end()
        self._since, self._waits_ms = None, 0.0

    def backward_on(self, tensor: Any) -> None:
        """An outermost backward on ``tensor`` starts: training; its batch reached backward."""
        self.watch.backward(self._span.open)
        self._span.end()
        self._since, self._waits_ms = None, 0.0
        self._seen.reached_backward()
        self._losses.backward_on(tensor)
