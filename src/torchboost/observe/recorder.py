"""Step accounting: phase times between step boundaries, the run's stages, and the facts.

The :class:`StepRecorder` is fed by the hooks in :mod:`torchboost.observe.instrument`
(which only measure and call in) and decides what a boundary means: warm-up, a
recorded step, a profiled step, or the end of observation (it raises
:class:`StopObserving`). Host times come from ``time.perf_counter``; on CUDA the
forward, backward and optimizer phases are timed with CUDA events instead and the
recorder calls ``torch.cuda.synchronize()`` once per step, at the boundary, so the
step's total includes the device work it launched (this removes the overlap of one
step's device work with the next step's host work, a cost we accept for honest
per-step numbers; no other sync is added).
"""

from __future__ import annotations

import json
import os
import statistics
import time
import weakref
from typing import Any, Callable

import torch

from torchboost import env as _env
from torchboost import handover
from torchboost._io import atomic_write_bytes
from torchboost.diagnose.facts import Facts, LoaderFacts, ModelFacts, OptimizerFacts, StepRecord
from torchboost.observe import describe
from torchboost.observe.cuda_phases import CudaPhases
from torchboost.observe.profile import ProfileWindow
from torchboost.observe.progress_file import ProgressFile, stage_of
from torchboost.observe.spec import ObserveSpec

__all__ = ["StepRecorder", "StopObserving", "DATA", "FORWARD", "BACKWARD", "OPTIMIZER", "SLOW_CHECK_STEPS"]

SLOW_CHECK_STEPS = 5
"""Recorded steps after which a tuning trial may be stopped as far too slow."""

DATA, FORWARD, BACKWARD, OPTIMIZER = range(4)
_PHASE_MARKS = ("torchboost: data wait", "torchboost: forward", "torchboost: backward", "torchboost: optimizer")
"""Phase indices into the recorder's accumulators (see ``torchboost.diagnose.facts.PHASES``)."""


class StopObserving(BaseException):
    """Ends the observed script at a step boundary once enough steps were seen.

    A BaseException so the script's ``finally`` blocks run and its ``except Exception``
    does not swallow it.
    """


class StepRecorder:
    """Turns hook calls into :class:`StepRecord` s and :class:`Facts` (see module docstring)."""

    def __init__(self, spec: ObserveSpec, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.spec = spec
        self.clock = clock
        self.acc = [0.0, 0.0, 0.0, 0.0]
        """Milliseconds spent per phase in the current step; hooks add to it."""
        self.step_source = "backward"
        self.stopped_slow = False
        """The trial was stopped early as far too slow (``spec.stop_slower_than_ms``)."""
        self.steps: list[StepRecord] = []
        self.current: int | None = None  # the phase now (DATA...OPTIMIZER, None between): the watchdog says it
        self.last_boundary = clock()  # clock at the last step boundary (or the start)
        self.stall: dict[str, Any] | None = None  # what the stall watchdog saw when it ended the run
        self.signal: str | None = None  # the signal that ended the run, when one did
        self.profile = ProfileWindow(spec.trace_path, warmup=spec.profile_warmup, active=spec.profile_active)
        self._boundaries = 0  # steps completed since counting (re)started
        self._discard_next = False
        self._step_start = clock()
        self._first_forward_at: float | None = None  # clock at the first outermost forward
        self._primary: Any = None  # weakref to the optimizer whose step ends a step
        self._losses: list[torch.Tensor] = []
        self._pending_loss: torch.Tensor | None = None
        self._loss_values: list[float] = []
        self._loaders: dict[int, list[Any]] = {}  # id(loader) -> [LoaderFacts, batches]
        self._iter_loader: dict[int, int] = {}  # id(iterator) -> id(loader)
        self._roots: dict[int, list[Any]] = {}  # id(module) -> [weakref, outermost calls]
        self._model: ModelFacts | None = None
        self._optimizer: OptimizerFacts | None = None
        self._autocast: dict[str, str] = {}  # device type -> dtype seen on during forward
        self._scaler: Any = None
        self._settings: dict[str, Any] = {}
        self._cuda: CudaPhases | None = None
        self._micro = 0  # backward passes (a closure counts once) in the current step
        self._in_closure = False
        self._micro_counts: list[int] = []
        self._last_flush = float("-inf")  # the first recorded step is flushed at once
        self._last_progress = float("-inf")
        self.ended = "finished"
        self.errors: list[str] = []
        """Failures inside the observer itself; recorded, never raised into the script."""
        self._bf16_speedup: float | None = None
        self._probe_started_cuda = False
        self._progress: ProgressFile | None = None
        self.warmup_ms: list[float] = []
        """Total milliseconds of each warm-up step."""
        self._warmup_losses: list[torch.Tensor] = []
        self._claims_before = handover.claims()
        self.applied: list[str] = []
        """Settings applied from outside, in words (filled by the bootstrap)."""
        self.on_warmup_end: list[Callable[[list[torch.nn.Module]], None]] = []
        """Called with :meth:`roots` once warm-up ends (the instrumentation narrows its hooks)."""

    # -- called by the hooks -------------------------------------------------------------
    def loader_iter(self, loader: Any, iterator: Any) -> None:
        """A DataLoader made an iterator (once per epoch)."""
        entry = self._loaders.setdefault(id(loader), [LoaderFacts(), 0])
        self._guarded(lambda: entry.__setitem__(0, describe.describe_loader(loader)))
        self._iter_loader[id(iterator)] = id(loader)

    def data_begin(self) -> None:
        """The loop asks its DataLoader for a batch."""
        self.current = DATA
        self.profile.annotate(_PHASE_MARKS[DATA])

    def loader_batch(self, iterator: Any, ms: float) -> None:
        """A batch was fetched from ``iterator`` after waiting ``ms`` milliseconds."""
        self.acc[DATA] += ms
        self.current = None
        self.profile.end_annotation()
        entry = self._loaders.get(self._iter_loader.get(id(iterator), -1))
        if entry is not None:
            entry[1] += 1

    def forward_begin(self, module: torch.nn.Module, autocast_devices: tuple[str, ...]) -> None:
        """An outermost module call starts."""
        if self._first_forward_at is None:
            self._first_forward_at = self.clock()
        entry = self._roots.get(id(module))
        if entry is None:
            self._roots[id(module)] = [weakref.ref(module), 1]
        else:
            entry[1] += 1
        for device_type in autocast_devices:
            if torch.is_autocast_enabled(device_type):
                self._autocast[device_type] = str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")
        self.phase_begin(FORWARD)

    def phase_end(self, phase: int, ms: float) -> None:
        """A phase ended after ``ms`` host milliseconds."""
        self.acc[phase] += ms
        self.profile.end_annotation()
        if self._cuda is not None:
            self._cuda.end(phase)

    def closure_begin(self) -> None:
        """``optimizer.step``'s closure starts (its time is not the optimizer's)."""
        if not self._in_closure:
            self._in_closure = True
            self._micro += 1  # an optimizer re-running its closure still steps on one batch
        if self._cuda is not None:
            self._cuda.carve_begin()

    def closure_end(self) -> None:
        """The closure given to ``optimizer.step`` returned."""
        if self._cuda is not None:
            self._cuda.carve_end()

    def backward_tensor(self, tensor: Any) -> None:
        """``backward`` was called on ``tensor``; a scalar is taken as the loss."""
        if isinstance(tensor, torch.Tensor) and tensor.numel() == 1:
            loss = tensor.detach()
            scale = getattr(self._scaler, "_scale", None)  # GradScaler multiplies the loss
            self._pending_loss = loss / scale if isinstance(scale, torch.Tensor) else loss

    def backward_done(self) -> None:
        """An outermost backward finished: a step boundary when no optimizer steps."""
        if not self._in_closure:
            self._micro += 1
        if self._primary is None:
            self.boundary()

    def optimizer_begin(self, optimizer: torch.optim.Optimizer) -> None:
        """An outermost ``optimizer.step`` starts."""
        if self._primary is None:
            self._adopt_optimizer(optimizer)
        self.phase_begin(OPTIMIZER)

    def optimizer_done(self, optimizer: torch.optim.Optimizer) -> None:
        """An outermost ``optimizer.step`` finished: the primary optimizer's marks a boundary."""
        if self._primary is not None and self._primary() is optimizer:
            self.boundary()

    @property
    def steps_seen(self) -> int:
        """Step boundaries seen since counting (re)started."""
        return self._boundaries

    def roots(self) -> list[torch.nn.Module]:
        """Live modules seen called outermost (the model, a loss module, ...)."""
        return [m for m in (entry[0]() for entry in self._roots.values()) if m is not None]

    # -- boundaries ----------------------------------------------------------------------
    def boundary(self) -> None:
        """End the current step; may start/drive the profiler or raise :class:`StopObserving`."""
        if self._cuda is not None:
            torch.cuda.synchronize()  # the one sync per step, see module docstring
            self._cuda.collect(self.acc)
        now = self.clock()
        self.last_boundary = now
        index = self._boundaries
        self._boundaries += 1
        spec = self.spec
        recorded_end = spec.warmup + spec.steps
        profiled_end = recorded_end + spec.profile_steps
        recording = spec.warmup <= index < recorded_end or (spec.full and index >= profiled_end)
        if recording and not self._discard_next:
            data, forward, backward, opt = self.acc
            self.steps.append(StepRecord(index, (now - self._step_start) * 1000.0, data, forward, backward, opt))
            if self._pending_loss is not None:
                self._losses.append(self._pending_loss)
            self._micro_counts.append(self._micro)
            self._stop_if_slow()
        elif index < spec.warmup and not self._discard_next:
            # Warm-up is kept apart: its extra time is the first-call (compile) cost, and
            # its losses let a tuning trial compare runs from step 0.
            self.warmup_ms.append((now - self._step_start) * 1000.0)
            if self._pending_loss is not None:
                self._warmup_losses.append(self._pending_loss)
        self._discard_next = False
        self._pending_loss = None
        self._micro, self._in_closure = 0, False
        self.acc[:] = (0.0, 0.0, 0.0, 0.0)
        if self._boundaries == max(spec.warmup, 1):
            self._guarded(self._snapshot_settings)
            for callback in self.on_warmup_end:
                self._guarded(callback, self.roots())
        self._guarded(self._report, recorded_end, profiled_end)  # before the profiler starts: flush is not profiled
        if self._boundaries == recorded_end and spec.profile_steps:
            self.profile.cuda = self._uses_cuda()
            self.profile.start()
        elif self.profile.running:
            self.profile.step()
        self.profile.annotate(f"torchboost: step {self._boundaries}")  # the report's step numbers
        if not spec.full and self._boundaries >= profiled_end:
            self.ended = "stopped"
            raise StopObserving
        self._cuda = CudaPhases(OPTIMIZER) if self._uses_cuda() else None
        self._step_start = self.clock()  # our bookkeeping above is not part of the next step

    def _stop_if_slow(self) -> None:
        limit = self.spec.stop_slower_than_ms
        if limit is None or len(self.steps) != SLOW_CHECK_STEPS:
            return
        if sum(s.total_ms for s in self.steps) / len(self.steps) > limit:
            self.stopped_slow = True
            raise StopObserving

    # -- facts -----------------------------------------------------------------------------
    def facts(self) -> Facts:
        """Everything seen so far, as :class:`Facts` (converts pending losses: may sync)."""
        if self._losses:
            self._loss_values.extend(float(t) for t in self._losses)
            self._losses.clear()
        if self._model is None:
            self._guarded(self._snapshot_settings)
        settings = self._settings
        loader = max(self._loaders.values(), key=lambda e: e[1])[0] if self._loaders else None
        cuda = self._uses_cuda()
        return Facts(
            env=settings.get("env", {}),
            command=list(self.spec.command),
            steps=list(self.steps),
            warmup_steps=self.spec.warmup,
            step_source=self.step_source,
            loader=loader,
            model=self._model,
            precision=describe.precision_settings(self._autocast_dtype(), self._scaler is not None),
            optimizer=self._optimizer,
            profile=self.profile.facts, gpu=self.profile.gpu,
            cpu_threads=settings.get("cpu_threads", torch.get_num_threads()),
            peak_memory_bytes=int(torch.cuda.max_memory_allocated()) if cuda else describe.peak_rss_bytes(),
            device_memory_total_bytes=int(settings.get("env", {}).get("gpu_memory_bytes", 0)) if cuda else 0,
            peak_rss_bytes=describe.peak_rss_bytes(),
            losses=list(self._loss_values),
            ended=self.ended,
            planned_steps=loader.num_batches if loader is not None else None,
            target_steps=None if self.spec.full else self.spec.steps,
            steps_seen=self._boundaries,
            warmup_step_ms=list(self.warmup_ms),
            warmup_losses=[float(t) for t in self._warmup_losses],
            uses_booster=handover.claims() > self._claims_before,
            frameworks=describe.frameworks(),
            applied=list(self.applied),
            observer_errors=list(self.errors),
            profile_error=self.profile.error,
            stopped_slow=self.stopped_slow,
            micro_steps_per_step=self._micro_median(),
            rank=self.spec.rank,
            stall=self.stall,
            signal=self.signal,
            world_size=int(os.environ.get("WORLD_SIZE", "1") or 1),
        )

    def _micro_median(self) -> float | None:
        if self.step_source != "optimizer" or not self._micro_counts:
            return None
        return float(statistics.median(self._micro_counts))

    def write_facts(self, exit_code: int | None = None) -> Facts:
        """Rewrite facts.json atomically; returns what was written.

        ``exit_code`` is given once, at the end of the run; only then is the CPU's bf16
        speed measured (~0.1 s), outside every recorded step.
        """
        facts = self.facts()
        if exit_code is not None:
            facts.exit_code = exit_code
            if self._model is not None and self._model.device == "cpu":
                self._guarded(self._measure_bf16)
        facts.cpu_bf16_speedup = self._bf16_speedup
        data = facts.to_dict()
        atomic_write_bytes(self.spec.facts_path, json.dumps(data, indent=1).encode())
        self._last_flush = self.clock()
        return facts

    # -- internals -------------------------------------------------------------------------
    def _guarded(self, fn: Callable[..., Any], *args: Any) -> None:
        # The observer must never break the user's run: a failure here is recorded in
        # the facts ("observer_errors") and the script goes on.
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"{getattr(fn, '__name__', 'observer')}: {type(exc).__name__}: {exc}")

    def _measure_bf16(self) -> None:
        self._bf16_speedup = float(_env.measure_cpu_bf16_speedup())

    def phase_begin(self, phase: int) -> None:
        """A phase starts: marked in the trace, timed on the device on CUDA."""
        self.profile.annotate(_PHASE_MARKS[phase])  # no string built per call: this is the hot path
        if self._cuda is not None:
            self._cuda.begin(phase)

    def _adopt_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        # Until now backward calls were taken as boundaries; restart counting on the
        # optimizer's steps. The step in flight is cut in two, so it is not recorded.
        self._primary = weakref.ref(optimizer)
        self.step_source = "optimizer"
        self._scaler = describe.find_grad_scaler(max_depth=16)
        if self._boundaries:
            # The first step's forward and backward, up to this optimizer step, stay in the
            # warm-up: a model compiled before training (a Booster's) compiles right there,
            # and that time is what the tuner weighs against compile's gain.
            first_ms = (self.clock() - self._first_forward_at) * 1000.0 if self._first_forward_at else 0.0
            self.profile.close()
            self.profile = ProfileWindow(self.spec.trace_path, warmup=self.spec.profile_warmup,
                                         active=self.spec.profile_active)
            self._boundaries = 0
            self.steps.clear()
            self._micro_counts.clear()
            self._losses.clear()
            self.warmup_ms[:] = [first_ms] if first_ms > 0 else []
            self._warmup_losses.clear()
            self._discard_next = True

    def _uses_cuda(self) -> bool:
        # The script's model is on CUDA, or (model unknown yet) the script started CUDA.
        # Never torch.cuda.is_available(): the observer must not be the one to start CUDA,
        # and the probe at the end of warm-up may have: that does not make a CPU run a GPU one.
        if self._model is not None:
            return self._model.device.startswith("cuda")
        return torch.cuda.is_initialized() and not self._probe_started_cuda

    def _autocast_dtype(self) -> str | None:
        device = (self._model.device if self._model else "cpu").split(":")[0]
        return self._autocast.get(device) or next(iter(self._autocast.values()), None)

    def _snapshot_settings(self) -> None:
        # End of warm-up: the script has set itself up; probing now cannot disturb its
        # setup (CUDA_VISIBLE_DEVICES, thread counts) and objects are still alive.
        cuda_before = torch.cuda.is_initialized()
        self._settings = {"env": _env.probe().to_dict(), "cpu_threads": torch.get_num_threads()}
        self._probe_started_cuda |= not cuda_before and torch.cuda.is_initialized()
        roots = [(e[0](), e[1]) for e in self._roots.values()]
        roots = [(m, calls) for m, calls in roots if m is not None]
        if roots:
            # The model is the root with parameters called most (a loss module has none).
            module = max(roots, key=lambda r: (any(True for _ in r[0].parameters()), r[1]))[0]
            self._model = describe.describe_model(module)
        optimizer = self._primary() if self._primary is not None else None
        if optimizer is not None:
            self._optimizer = describe.describe_optimizer(optimizer, self._model.device if self._model else "cpu")

    def _report(self, recorded_end: int, profiled_end: int) -> None:
        now = self.clock()
        done = self._boundaries
        transition = done in (self.spec.warmup, recorded_end, profiled_end)
        if self.spec.progress_path and (transition or now - self._last_progress >= 0.2):
            if self._progress is None:
                self._progress = ProgressFile(self.spec.progress_path)
            self._progress.write(stage_of(done, self.spec))
            self._last_progress = now
        if self.steps and not self.profile.running and (
            done == recorded_end or now - self._last_flush >= self.spec.flush_interval_s
        ):
            self.write_facts()
