"""Where an observed run is after each step boundary: warm-up, recorded steps, profiled steps, over.

A run warms up for ``spec.warmup`` steps, records ``spec.steps``, then profiles
``spec.profile_steps`` in the :class:`~torchboost.observe.probes.profile.ProfileWindow` this part
drives, and is over (unless ``spec.full``: then it records to the script's own end).
The profiler's first warm-up step is also the one whose FLOPs are counted
(:class:`~torchboost.observe.probes.flop_count.StepFlops`): neither recorded nor profiled. After
the window, a bounded run times a few steps fed with batches already seen
(:class:`~torchboost.observe.probes.replay.ReplayBatches`), then each switchable finding's fix
for a few steps against plain ones (:class:`~torchboost.observe.probes.quick.QuickProbes`), then
is over. Neither kind of probe step is recorded: they are in no figure but their own. A tuning
trial has no profiler window; a burst trial (its plan's switches, handed over) runs its bursts
right after its recorded steps.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from torchboost import env as _env
from torchboost.observe.probes.flop_count import StepFlops
from torchboost.observe.probes.profile import ProfileWindow, Quiet
from torchboost.observe.probes.quick import QuickProbes, max_quick_steps
from torchboost.observe.probes.replay import REPLAY_MIN_DATA_PCT, REPLAY_STEPS, ReplayBatches
from torchboost.observe.spec import ObserveSpec
from torchboost.observe.record.step_timing import StepTiming

__all__ = ["RunStages"]


class RunStages:
    """The run's course by step boundaries, and the profiler window it drives."""

    def __init__(self, spec: ObserveSpec, timing: StepTiming | None = None, losses: Any = None, *,
                 profiler_quiet: Quiet = contextlib.nullcontext, burst_trial: bool = False) -> None:
        self._spec = spec
        self._burst_trial = burst_trial  # its plan's switches are alternated after the recorded steps
        self._timing = timing
        self._losses = losses
        self._profiler_quiet = profiler_quiet
        self.profile = self._window()
        """The profiler window of this run (replaced when step counting restarts)."""
        self.flops = StepFlops()
        """The FLOP count of one step (the profiler's first warm-up step)."""
        self.replay = ReplayBatches()
        """The replay probe: steps after the profiler window fed with batches already seen."""
        self.quick = QuickProbes()
        """The quick probes: each switchable finding's fix timed against plain steps, after the replay."""
        self.quick_start: Callable[[QuickProbes], bool] | None = None
        """Starts :attr:`quick` (chooses the switches from the facts so far); set by the recorder."""
        self.planned: Callable[[], int | None] = lambda: None
        """The script's planned run in steps (None: unknown), as the facts so far give it; set by
        :class:`~torchboost.observe.record.facts_so_far.FactsSoFar`."""

    def warmup_ends(self, done: int) -> bool:
        """The ``done``-th boundary ends warm-up (the first one when there is none)."""
        start = self._timing.window.start if self._timing is not None else self._spec.warmup
        return done == max(start, 1)

    def advance(self, done: int, uses_cuda: Callable[[], bool]) -> bool:
        """Drive the profiler after the ``done``-th boundary; True when observation is over."""
        spec = self._spec
        recorded_end = self._timing.window.end if self._timing is not None else spec.warmup + spec.steps
        self.flops.stop()  # the counted step, if any, ends at this boundary
        if done == recorded_end and spec.profile_steps:
            self.profile.cuda = uses_cuda()
            self.profile.start()
            if spec.profile_warmup:  # a warm-up step: its time is in no figure
                self.flops.start()
        elif self.profile.running:
            self.profile.step()
        self.profile.annotate(f"torchboost: step {done}")  # the report's step numbers
        return not spec.full and self._replayed(done, recorded_end + spec.profile_steps)

    def _replayed(self, done: int, profiled_end: int) -> bool:
        """Drive the replay probe after the profiler window (bounded runs with one only);
        True when it is over (or there is none)."""
        replay = self.replay
        if replay.active and self._timing is not None:
            replay.step_ms.append(self._timing.last_ms)
        if done < profiled_end:
            return False
        if _in_a_job():  # each rank would decide on its own figures, stop at another step and leave its peers hanging
            return True
        if (done == profiled_end and self._spec.profile_steps and self._waits_for_data() and self._room(done)
                and replay.start()):
            return False
        if replay.active and len(replay.step_ms) < REPLAY_STEPS:
            return False
        replay.stop()
        return self._probed(done == profiled_end)

    def _probed(self, first: bool) -> bool:
        """Drive the quick probes after the replay (``first``: right after the profiler window,
        no replay ran); True when they are over (or there are none)."""
        quick, timing = self.quick, self._timing
        if quick.active:
            loss = self._losses.last if self._losses is not None else None
            return not quick.after_step(timing.last_ms if timing is not None else 0.0, loss)
        if quick.results or self.quick_start is None:
            return True
        if not self._burst_trial and (not self._spec.profile_steps or not (first or self.replay.step_ms)):
            return True  # tune's trials (no profiler window) probe only as burst trials
        return not self.quick_start(quick)

    def _room(self, done: int) -> bool:
        """The script would run the replay's steps and the quick probes' after ``done`` anyway:
        re-served batches are extra turns of its loop, and a loop sized to the run (a
        ``OneCycleLR`` of ``total_steps``) must not turn more often than it would have."""
        planned = self.planned()
        return planned is None or done + REPLAY_STEPS + max_quick_steps() <= planned

    def _waits_for_data(self) -> bool:
        """The recorded steps waited for data long enough for the replay probe to matter."""
        steps = self._timing.steps if self._timing is not None else []
        total = sum(s.total_ms for s in steps)
        return total > 0 and 100.0 * sum(s.data_ms for s in steps) / total >= REPLAY_MIN_DATA_PCT

    def restart(self) -> None:
        """Step counting restarts: a profiler window of the old count is closed, a new one waits."""
        self.profile.close()
        self.flops.stop(keep=False)
        self.profile = self._window()

    def _window(self) -> ProfileWindow:
        spec = self._spec
        return ProfileWindow(spec.trace_path, warmup=spec.profile_warmup, active=spec.profile_active,
                             quiet=self._profiler_quiet)


def _in_a_job() -> bool:
    """The process is one rank of several (torch.distributed initialised, or torchrun's
    WORLD_SIZE): the replay and quick probes, decided per rank, are not run."""
    place = _env.job_place()
    return (place[1] if place is not None else _env.world_size()) > 1
