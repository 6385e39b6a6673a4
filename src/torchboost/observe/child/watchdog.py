"""The observed child's two guards: a stall watchdog, and dying with its parent.

*Stall*: a script that stops making progress (a deadlocked loader worker, a sleep, a
wait on a dead peer) would keep the doctor or a tuning trial waiting forever. A daemon
thread looks twice a second at the time since the last step boundary; past
``max(timeout_s, STALL_FACTOR x the median step)`` it names what the script was doing
(from the phase the hooks last entered), writes the facts seen so far with
``ended = "stalled"``, and ends the process with :data:`STALL_EXIT`. The thread only
reads the clock and two attributes; it never touches the script's objects.

*Compiling* is not stalling: while torch.compile compiles (its frames on a thread's
stack, :mod:`~torchboost.observe.child.compiling`) the clock stops counting toward the stall
limit and the progress line says "compiling (N s so far)". A compile has its own, much
longer bound, :data:`COMPILE_LIMIT_S`, so one that never ends still ends.

*Parent*: the child must not outlive the torchboost process that started it (a ``kill
-9`` of tune must not leave its trial running). On Linux the kernel sends SIGKILL when
the parent dies (``PR_SET_PDEATHSIG``); elsewhere the same thread notices the parent is
gone and ends the process.
"""

from __future__ import annotations

import ctypes
import os
import signal
import statistics
import sys
import threading
from typing import Any

from torchboost.observe.child.compiling import compiling_now
from torchboost.techniques.compile.compile_facts import harvest
from torchboost.observe.record.phases import BACKWARD, DATA, FORWARD, OPTIMIZER
from torchboost.observe.record.recorder import StepRecorder

__all__ = ["COMPILE_LIMIT_S", "OWN_WORK", "STALL_EXIT", "STALL_FACTOR", "StallWatchdog", "die_with_parent", "doing"]

STALL_EXIT = 124
"""Exit status of a run ended for stalling (what ``timeout`` uses)."""
STALL_FACTOR = 20
"""A step this many times the median is a stall even past the fixed timeout."""
BOOKKEEPING_LIMIT_S = 120.0
"""The bound on torchboost's own work at a step boundary (the profiler's start, the end of
warm-up's probes): never the script's stall, but it must still end."""
OWN_WORK = "torchboost's own work (reading the profiler's trace, the warm-up's probes)"
"""What a run ended past :data:`BOOKKEEPING_LIMIT_S` was doing: never the script's stall."""
COMPILE_LIMIT_S = 1800.0
"""The bound on one unbroken stretch of compiling (torch.compile): a compile is not a
stall, but one that runs half an hour is ended as one."""
_TICK_S = 0.5
_PR_SET_PDEATHSIG = 1

_DOING = {DATA: "waiting for data (the DataLoader)", FORWARD: "in the forward pass",
          BACKWARD: "in the backward pass", OPTIMIZER: "in the optimizer step"}


def doing(phase: int | None, steps_seen: int) -> str:
    """Words for what the script was doing: its phase, or where it was between phases."""
    if phase in _DOING:
        return _DOING[phase]
    if steps_seen == 0:
        return "before its first training step (start-up, loading, compiling)"
    return "outside any training phase (the script's own code between steps)"


class StallWatchdog:
    """Ends the process when no step boundary comes for too long (see the module docstring)."""

    def __init__(self, recorder: StepRecorder, timeout_s: float, *, parent_pid: int | None = None,
                 torchboost_pid: int | None = None, after_first_step: bool = False) -> None:
        self.recorder = recorder
        self.timeout_s = timeout_s
        self.parent_pid = parent_pid
        self.torchboost_pid = torchboost_pid
        """A process of a command's tree ends when this torchboost process is gone (its own
        parent is the user's launcher, not torchboost)."""
        self.after_first_step = after_first_step
        """Count stalls only once the process trains (its first forward pass or DataLoader
        batch asked for): in a command's tree, a launcher or a loader worker imports torch
        and never trains, and is no stall."""
        self._training_since: float | None = None
        self.compiling_s = 0.0
        """Seconds spent compiling since the last step boundary (not counted as stalling)."""
        self.compile_streak_s = 0.0
        """Seconds of the compile going on now, unbroken (bounded by :data:`COMPILE_LIMIT_S`)."""
        self._boundary_seen: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torchboost-watchdog", daemon=True)

    def start(self) -> "StallWatchdog":
        """Start watching (a daemon thread)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (the script ended)."""
        self._stop.set()

    def limit_s(self) -> float:
        """The stall limit now: the timeout, or 20 median steps when that is longer."""
        timing = self.recorder.timing
        steps = [s.total_ms for s in timing.steps] or list(timing.warmup_ms[1:])
        median_s = statistics.median(steps) / 1000.0 if steps else 0.0
        own = BOOKKEEPING_LIMIT_S if timing.bookkeeping else 0.0
        return max(self.timeout_s, STALL_FACTOR * median_s, own)

    def _run(self) -> None:
        last_tick = self.recorder.clock()
        while not self._stop.wait(_TICK_S):
            if self._orphaned():
                os._exit(128 + signal.SIGKILL)  # the parent is gone: end as its kill would have
            now = self.recorder.clock()
            self.tick(now - last_tick, compiling=compiling_now())
            self.recorder.guarded(harvest)  # torch.compile's metrics, before newer ones push them out
            last_tick = now
            since = self.idle_s(now)
            if since is None:
                continue
            if self.compile_streak_s > COMPILE_LIMIT_S:
                self._stalled(since, "compiling (torch.compile)")
            elif since - self.compiling_s > self.limit_s():
                self._stalled(since)

    def idle_s(self, now: float) -> float | None:
        """Seconds since the last step boundary at ``now`` (the recorder's clock); with
        ``after_first_step``, since the process began to train when that is later, and None
        before it has (a launcher, a loader worker)."""
        since = now - self.recorder.timing.last_boundary
        if not self.after_first_step:
            return since
        if self._training_since is None:
            if not self._trains():
                return None
            self._training_since = now
        return min(since, now - self._training_since)

    def _trains(self) -> bool:
        """The process has started training: a step, a forward pass, or a batch asked for."""
        recorder = self.recorder
        return bool(recorder.timing.boundaries or recorder.seen.first_forward_at is not None
                     or recorder.current is not None)

    def _orphaned(self) -> bool:
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            return True
        if self.torchboost_pid is None:
            return False
        try:
            os.kill(self.torchboost_pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, another user's: not ours to judge
        return False

    def tick(self, elapsed_s: float, *, compiling: bool) -> None:
        """Account ``elapsed_s`` seconds since the last look: compiling time is excused
        from the stall clock (until the next step boundary) and shown on the progress line."""
        boundary = self.recorder.timing.last_boundary
        if boundary != self._boundary_seen:
            self._boundary_seen, self.compiling_s = boundary, 0.0
        shown = self.compile_streak_s > 0
        if compiling:
            self.compiling_s += elapsed_s
            self.compile_streak_s += elapsed_s
        else:
            self.compile_streak_s = 0.0
        if compiling or shown:  # the line says "compiling" while it is, and not a moment after
            self.recorder.guarded(self.recorder.output.show_compiling, self.recorder.timing.boundaries,
                                  self.compiling_s if compiling else None)

    def stall_record(self, since: float, what: str | None = None) -> tuple[dict[str, Any], str]:
        """The facts' ``stall`` entry and the line said for a stall found ``since`` seconds after
        the last step boundary. Past the bound on torchboost's own work at a boundary (the
        profiler's reading of its trace, the warm-up's probes), the entry says ``own`` and the
        line names torchboost's work, not the script's."""
        recorder = self.recorder
        at_step = recorder.timing.boundaries
        own = what is None and recorder.timing.bookkeeping
        what = what or (OWN_WORK if own else doing(recorder.current, at_step))
        compiling = self.compile_streak_s > COMPILE_LIMIT_S
        limit_s = COMPILE_LIMIT_S if compiling else self.limit_s()
        stall = {"doing": what, "after_s": round(since, 1), "limit_s": round(limit_s, 1), "at_step": at_step,
                 "compiling_s": round(self.compiling_s, 1), "own": own}
        if own:
            return stall, (f"torchboost: {OWN_WORK} after step {at_step} took {since:.0f} s, past its {limit_s:.0f} s "
                           "bound; ending the run (torchboost's stall, not the script's)")
        bound = "a compile's bound" if compiling else "--stall-timeout to change"
        return stall, (f"torchboost: no training step for {since:.0f} s, the script {what} at step "
                       f"{at_step}; ending it (limit {limit_s:.0f} s, {bound})")

    def _stalled(self, since: float, what: str | None = None) -> None:
        recorder = self.recorder
        recorder.run.ended = "stalled"
        recorder.run.stall, line = self.stall_record(since, what)
        print(line, file=sys.stderr, flush=True)
        try:
            recorder.write_facts(STALL_EXIT)
        except Exception as exc:  # noqa: BLE001 - the exit below must happen
            print(f"torchboost: could not write the facts: {exc}", file=sys.stderr, flush=True)
        os._exit(STALL_EXIT)


def die_with_parent(parent_pid: int | None) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); True when set.
    Elsewhere :class:`StallWatchdog` polls for the parent instead."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc: Any = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(128 + signal.SIGKILL)  # the parent died before the request took effect
    return True
