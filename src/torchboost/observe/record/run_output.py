"""The observed run's facts as built so far, and what it writes as it goes: progress, ``facts.json``.

The facts are built by :func:`~torchboost.observe.record.facts_builder.build_facts`; the first
build with the script's objects alive (the end of warm-up) is kept, so the descriptions
of the model and optimizer outlive them. The progress line is rewritten at each stage change and at most every 0.2 s (the step
count, :class:`~torchboost.observe.spec.StepCounter`, at every boundary); the facts
are rewritten at the first recorded step, then at most every ``spec.flush_interval_s``,
never while the profiler runs (the write would be profiled), and at the end of the
recorded steps, so a run that crashes later keeps what was seen.
"""

from __future__ import annotations

import errno
import json
import time
from typing import TYPE_CHECKING, Callable

from torchboost import env as _env
from torchboost._io import atomic_write_bytes
from torchboost.evidence.observed import Facts
from torchboost.observe.record.facts_builder import build_facts, uses_cuda
from torchboost.observe.spec import ObserveSpec, ProgressFile, StepCounter, stage_of

if TYPE_CHECKING:  # the recorder imports this module: the type is for readers only
    from torchboost.observe.record.recorder import StepRecorder

__all__ = ["RunOutput"]

_PROGRESS_INTERVAL_S = 0.2


class RunOutput:
    """Builds and writes the facts of one observed run, and its progress line."""

    def __init__(self, spec: ObserveSpec, clock: Callable[[], float]) -> None:
        self._spec = spec
        self._clock = clock
        self._progress: ProgressFile | None = None
        self._counter: StepCounter | None = None
        self._count_path = spec.count_path  # None once it could not be made
        self._last_flush = float("-inf")  # the first recorded step is flushed at once
        self._last_progress = float("-inf")
        self._described: Facts | None = None  # facts built while the script's objects lived
        self.started_at = time.time()
        """When observation began (wall clock): what the process did before is not this run's."""
        self.bf16_speedup: float | None = None
        """The CPU's bf16 matmul speed over fp32, once measured at the run's end."""

    def uses_cuda(self, probe_started_cuda: bool) -> bool:
        """The script trains on CUDA (see :func:`~torchboost.observe.record.facts_builder.uses_cuda`)."""
        return uses_cuda(self._described.model if self._described else None, probe_started_cuda)

    def at_warmup_end(self, recorder: StepRecorder) -> None:
        """Probe the settings and describe the script's objects while they are set up and alive."""
        recorder.seen.snapshot_settings()
        self._described = build_facts(recorder, self._described, fresh=True)

    def facts(self, recorder: StepRecorder) -> Facts:
        """Everything ``recorder`` has seen so far (converts pending losses: may sync)."""
        if self._described is None or self._described.model is None:
            recorder.guarded(recorder.seen.snapshot_settings)
        facts = build_facts(recorder, self._described)
        if self._described is None or self._described.model is None:
            self._described = facts
        return facts

    def write_facts(self, recorder: StepRecorder, exit_code: int | None) -> Facts:
        """Rewrite facts.json atomically; returns what was written (see ``StepRecorder.write_facts``)."""
        facts = self.facts(recorder)
        if exit_code is not None:
            facts.exit_code = exit_code
            if facts.model is not None and facts.model.device == "cpu":
                recorder.guarded(self._measure_bf16)
        facts.cpu_bf16_speedup = self.bf16_speedup
        try:
            atomic_write_bytes(self._spec.facts_path, json.dumps(facts.to_dict(), indent=1).encode())
        except OSError as exc:
            self._tell_parent(exc.errno or errno.EIO)  # a full disk: the parent says so
            raise
        self._tell_parent(0)
        self._last_flush = self._clock()
        return facts

    def _tell_parent(self, write_errno: int) -> None:
        counter = self._count_file()
        if counter is not None:
            counter.write_failed(write_errno)

    def _count_file(self) -> StepCounter | None:
        """The step count shared with the parent (None when the spec has no file for it)."""
        if self._counter is None and self._count_path:
            try:
                self._counter = StepCounter(self._count_path)
            except OSError:  # no room even for it: the parent does without the count
                self._count_path = None
        return self._counter

    def after_boundary(self, done: int, *, has_steps: bool, profiling: bool, write_facts: Callable[[], object]) -> None:
        """After the ``done``-th step boundary: update the progress line, flush the facts when due."""
        spec = self._spec
        counter = self._count_file()
        if counter is not None:  # every boundary: the parent's count survives an os._exit
            counter.set(done)
        now = self._clock()
        recorded_end = spec.warmup + spec.steps
        profiled_end = recorded_end + spec.profile_steps
        transition = done in (spec.warmup, recorded_end, profiled_end)
        if spec.progress_path and (transition or now - self._last_progress >= _PROGRESS_INTERVAL_S):
            if self._progress is None:
                self._progress = ProgressFile(spec.progress_path)
            self._progress.write(stage_of(done, spec))
            self._last_progress = now
        if has_steps and not profiling and (done == recorded_end or now - self._last_flush >= spec.flush_interval_s):
            write_facts()

    def show_compiling(self, done: int, seconds: float | None) -> None:
        """The progress line while torch.compile compiles, ``seconds`` so far (None: it
        stopped); called from the watchdog's thread."""
        if not self._spec.progress_path:
            return
        if self._progress is None:
            self._progress = ProgressFile(self._spec.progress_path)
        line = stage_of(done, self._spec)
        self._progress.write(line if seconds is None else {**line, "compiling_s": round(seconds)})

    def _measure_bf16(self) -> None:
        # ~0.1 s: only at the end, outside every recorded step.
        self.bf16_speedup = float(_env.measure_cpu_bf16_speedup())
