"""What the observed run writes as it goes: the progress line, the step count, ``facts.json``.

A plain writer: it is handed the :class:`Facts` to write
(:class:`~torchboost.observe.record.facts_so_far.FactsSoFar` builds them) and the step
boundaries as they come. The progress line is rewritten at each stage change and at most every 0.2 s (the step
count, :class:`~torchboost.observe.spec.StepCounter`, at every boundary); the facts
are rewritten when the recorded steps reach 1, 2, 4, 8, ... and at least every
``spec.flush_interval_s``, never while the profiler runs (the write would be profiled), and
at the end of the recorded steps, so a run killed later (SIGKILL, ``os._exit``: nothing
runs in it after) keeps at least half of the steps it recorded, and those of the last
seconds. The writes are torchboost's time, outside every step's.
"""

from __future__ import annotations

import errno
from typing import Callable

from torchboost import _json as strict_json
from torchboost._io import atomic_write_bytes
from torchboost.evidence.observed import Facts
from torchboost.observe.record.recording_window import RecordingWindow
from torchboost.observe.spec import ObserveSpec, ProgressFile, StepCounter, stage_of

__all__ = ["RunOutput"]

_PROGRESS_INTERVAL_S = 0.2


class RunOutput:
    """Writes the facts of one observed run, its step count and its progress line."""

    def __init__(self, spec: ObserveSpec, clock: Callable[[], float], window: RecordingWindow | None = None) -> None:
        self._spec = spec
        self._clock = clock
        self._window = window  # where recording ends (None: after spec.steps)
        self._progress: ProgressFile | None = None
        self._counter: StepCounter | None = None
        self._count_path = spec.count_path  # None once it could not be made
        self._last_flush = float("-inf")  # the first recorded step is flushed at once
        self._flushed_steps = 0  # the recorded steps at the last flush
        self._last_progress = float("-inf")

    def write_facts(self, facts: Facts) -> None:
        """Rewrite facts.json atomically with ``facts``; the parent learns of a failed write
        (a full disk) through the step count."""
        try:
            atomic_write_bytes(self._spec.facts_path, strict_json.dumps(facts.to_dict(), indent=1).encode())
        except OSError as exc:
            self._tell_parent(exc.errno or errno.EIO)  # a full disk: the parent says so
            raise
        self._tell_parent(0)
        self._last_flush = self._clock()

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

    def _bounds(self) -> tuple[int, int]:
        """The boundaries that start and end recording (the window's, as they moved)."""
        if self._window is not None:
            return self._window.start, self._window.end
        return self._spec.warmup, self._spec.warmup + self._spec.steps

    def after_boundary(self, done: int, *, steps: int, profiling: bool, write_facts: Callable[[], object]) -> None:
        """After the ``done``-th step boundary, with ``steps`` recorded so far: update the
        progress line, flush the facts when due."""
        spec = self._spec
        counter = self._count_file()
        if counter is not None:  # every boundary: the parent's count survives an os._exit
            counter.set(done)
        now = self._clock()
        start, recorded_end = self._bounds()
        profiled_end = recorded_end + spec.profile_steps
        transition = done in (start, recorded_end, profiled_end)
        if spec.progress_path and (transition or now - self._last_progress >= _PROGRESS_INTERVAL_S):
            if self._progress is None:
                self._progress = ProgressFile(spec.progress_path)
            self._progress.write(stage_of(done, spec, (start, recorded_end)))
            self._last_progress = now
        doubled = steps > 0 and steps & (steps - 1) == 0 and steps != self._flushed_steps
        if steps and not profiling and (done == recorded_end or doubled or now - self._last_flush >= spec.flush_interval_s):
            write_facts()
            self._flushed_steps = steps

    def show_compiling(self, done: int, seconds: float | None) -> None:
        """The progress line while torch.compile compiles, ``seconds`` so far (None: it
        stopped); called from the watchdog's thread."""
        if not self._spec.progress_path:
            return
        if self._progress is None:
            self._progress = ProgressFile(self._spec.progress_path)
        line = stage_of(done, self._spec, self._bounds())
        self._progress.write(line if seconds is None else {**line, "compiling_s": round(seconds)})
