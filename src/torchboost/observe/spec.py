"""The one contract between the doctor's parent and its observed child.

The parent tells the child what to do in an :class:`ObserveSpec`: step counts and where
to write facts. It writes the spec to a JSON file and passes that file's path on the
child's command line. Processes the command starts itself (a shell wrapper's ``python``,
``accelerate launch``'s worker, ranks spawned with ``torch.multiprocessing``) cannot be
given a command-line word, so the same path also travels in the tree's spec
(:class:`~torchboost.process.tree_spec.TreeSpec`), which names :mod:`torchboost.observe.child.tree`
as their observer; each such process writes files tagged with its process id
(:meth:`ObserveSpec.for_process`). The child answers in
three files: ``facts.json`` (its :class:`~torchboost.evidence.observed.Facts`), the
progress line (:class:`ProgressFile`, :func:`stage_of`) and the step count
(:class:`StepCounter`, :func:`read_count`, :func:`reconcile`), each described below.
Both sides import this module; it imports neither.

The step count: ``facts.json`` is written at the first recorded step, every few seconds,
and at the script's end; a script that ends its process itself (``os._exit(3)``, a native
library's ``exit``) skips that last write, and its facts would say what did not happen:
"finished", exit code 0, the steps of the last write. So at every step boundary the child
also stores the count of boundaries in an 8-byte shared file mapping (a store into
memory, no system call), which the kernel keeps when the process ends, however it ends.
After the child has gone, the parent reads the count and, with the exit status it saw
itself, corrects the facts (:func:`reconcile`) and rewrites ``facts.json``: the parent's
word on how the run ended is the last. The same file carries the errno of a facts.json
write that failed (a full disk), so the parent says the disk is full rather than that no
step was seen.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchboost import _json as strict_json
from torchboost._io import atomic_write_bytes
from torchboost.evidence.observed import Facts

__all__ = ["ObserveSpec", "MIN_TIMED_STEPS", "FACTS_FILE", "TRACE_FILE", "RUN_FILES", "tree_file", "REPLAY_STEPS", "rank_file", "ProgressFile", "stage_of",
           "ChildCount", "StepCounter", "read_count", "reconcile"]

FACTS_FILE = "facts.json"
"""Name of the facts file inside the output folder."""
TRACE_FILE = "trace.pt.trace.json"
"""Name of the Chrome-trace file inside the output folder (TensorBoard's profiler plugin
opens ``*.pt.trace.json`` files only)."""
RUN_FILES = ("facts*.json", ".facts*.tmp", "trace*.json", "trace*.json.tmp", ".trace*.tmp")
"""What an observed run itself writes into its report folder, as shell patterns (each
rank's and each process's facts and trace, their temporary files): torchboost's own
entries there, which the write guard leaves alone while it guards the rest of the folder."""
REPLAY_STEPS = 3
"""Steps timed with re-served batches, after the profiler window
(:mod:`torchboost.observe.probes.replay`)."""


def rank_file(name: str, rank: int) -> str:
    """``facts.json`` for rank 0, ``facts.rank1.json`` for rank 1, ... (``trace.rank1.pt.trace.json``)."""
    if rank == 0:
        return name
    stem, dot, suffix = name.partition(".")  # trace.pt.trace.json -> trace.rank1.pt.trace.json
    return f"{stem}.rank{rank}{dot}{suffix}"


def tree_file(name: str, pid: int) -> str:
    """``facts.pid123.json`` for process 123 of a tree (``trace.pid123.pt.trace.json``)."""
    stem, dot, suffix = name.partition(".")
    return f"{stem}.pid{pid}{dot}{suffix}"


MIN_TIMED_STEPS = 6
"""Fewest steps a run bounded by ``ObserveSpec.record_s`` records: a median of six ignores
two long ones."""


@dataclass(frozen=True)
class ObserveSpec:
    """Step counts and output locations for one observed run.

    The run is: ``warmup`` steps (not recorded), ``steps`` recorded steps, then a
    profiler window of ``profile_warmup + profile_active`` steps (not recorded: the
    profiler slows them), then the script is stopped, unless ``full``.
    """

    out_dir: str
    """Folder for facts.json and trace.pt.trace.json (absolute path)."""
    steps: int = 20
    """Recorded training steps after warm-up."""
    warmup: int = 5
    """Steps run before recording starts (first-call costs, compile, caches)."""
    record_s: float | None = None
    """A time bound on recording: once at least ``MIN_TIMED_STEPS`` steps are recorded and
    they took this many seconds, recording ends there (the profiler window and the probes
    follow as after ``steps``); None: ``steps`` steps. Seconds-long steps then cost the run
    seconds, not minutes."""
    precision: float | None = None
    """Recording also ends once the median step is known within this fraction (after a few
    seconds of steps, at least ``MIN_TIMED_STEPS``); None: no such stop
    (:mod:`torchboost.observe.record.recording_window`)."""
    settle_warmup: bool = False
    """Warm-up ends early, from its second step, once its steps settled; ``warmup`` is then
    its most."""
    full: bool = False
    """Let the script run to its own end, recording every step after warm-up."""
    profile_warmup: int = 1
    """Profiler warm-up steps (recorded by the profiler, then discarded)."""
    profile_active: int = 2
    """Profiler steps kept in the op table and the trace; small keeps the trace small."""
    line_sample_ms: float | None = 10.0
    """Milliseconds between two looks of the line sampler at the training thread's stack
    during the recorded steps (:mod:`torchboost.observe.record.line_sampler`); None: the
    user's lines are not sampled (a tuning trial's figures stay the script's own)."""
    progress_path: str | None = None
    """File the child rewrites with {"stage", "step", "of"} for the parent's progress line."""
    count_path: str | None = None
    """File the child keeps its step count in, for the parent to read after it ends
    (:class:`StepCounter`)."""
    flush_interval_s: float = 5.0
    """Least time between two rewrites of facts.json during the run, seconds (each costs
    tens of milliseconds with its fsync; facts are also written when recording ends and
    when the script exits or crashes)."""
    stop_slower_than_ms: float | None = None
    """A tuning trial's bound: once ``SLOW_CHECK_STEPS`` steps are recorded, a median step
    time above this stops the script (a candidate already far slower than the incumbent)."""
    stop_decided_ms: float | None = None
    """A tuning trial's incumbent, ms/step: once the recorded steps put the trial's ratio to it
    beyond ``stop_decided_margin`` either way, beyond their own spread, the script is stopped
    (:mod:`torchboost.observe.record.sequential_stop`); None runs every step."""
    stop_decided_margin: float = 0.03
    """The fraction a decided ratio must clear (the search's least gain or noise floor)."""
    stall_timeout_s: float | None = 60.0
    """No step boundary for this long (or 20 median steps, when longer) ends the run as
    stalled; None never does."""
    parent_pid: int | None = None
    """The torchboost process that started the run: the child ends if it is gone (a rank
    under torchrun watches torchrun's agent instead)."""
    rank: int = 0
    """The process's rank in a torchrun job: rank 0 writes facts.json and trace.pt.trace.json,
    rank R ``facts.rankR.json`` and ``trace.rankR.pt.trace.json``; only rank 0 writes progress."""
    command: list[str] = field(default_factory=list)
    """The user's command, as typed, for the facts. (A tuning trial's settings, a burst
    trial's switches among them, are not here: they reach the child once, in the plan,
    through :mod:`torchboost.handover`.)"""
    pid: int | None = None
    """Set for a process of the command's tree (:meth:`for_process`): its files are tagged
    with this process id, since its rank is not known when it starts."""
    guard: dict[str, Any] | None = None
    """The write guard's spec (:class:`~torchboost.process.guard.guard_spec.WriteGuardSpec` as a
    dict) for the observed child itself: the user's files are kept as they were; None: the
    run's writes stay (``--full``). The tree's other processes have it from the tree's spec
    (:class:`~torchboost.process.tree_spec.TreeSpec`)."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be 0 or more, got {self.warmup}")
        if self.record_s is not None and not self.record_s > 0:
            raise ValueError(f"record_s must be positive, got {self.record_s}")
        if self.precision is not None and not 0 < self.precision < 1:
            raise ValueError(f"precision must be a fraction between 0 and 1, got {self.precision}")
        if self.profile_active < 0 or self.profile_warmup < 0:
            raise ValueError("profile_warmup and profile_active must be 0 or more")

    def for_rank(self, rank: int) -> "ObserveSpec":
        """This spec for rank ``rank`` of a torchrun job (itself for rank 0)."""
        if rank == 0:
            return self
        return dataclasses.replace(self, rank=rank, progress_path=None, count_path=None)

    def for_process(self, pid: int) -> "ObserveSpec":
        """This spec for process ``pid`` of the command's tree: its facts, trace and step
        count tagged with ``pid`` (the parent orders them by rank once they have ended)."""
        count = None if self.count_path is None else f"{self.count_path}.pid{pid}"
        return dataclasses.replace(self, pid=pid, count_path=count)

    def _named(self, name: str) -> Path:
        return Path(self.out_dir) / (tree_file(name, self.pid) if self.pid is not None else rank_file(name, self.rank))

    @property
    def facts_path(self) -> Path:
        """Where the child writes facts.json (``facts.rankR.json`` for rank R > 0,
        ``facts.pidN.json`` for process N of a tree)."""
        return self._named(FACTS_FILE)

    @property
    def trace_path(self) -> Path:
        """Where the child writes the Chrome trace (``trace.rankR.pt.trace.json`` for rank R > 0)."""
        return self._named(TRACE_FILE)

    @property
    def profile_steps(self) -> int:
        """Steps the profiler window spans (0: no profile)."""
        return self.profile_warmup + self.profile_active if self.profile_active else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return dataclasses.asdict(self)

    def write(self, path: Path) -> None:
        """Write the spec as JSON to ``path``."""
        atomic_write_bytes(Path(path), strict_json.dumps(self.to_dict(), indent=2).encode())

    @classmethod
    def read(cls, path: Path) -> "ObserveSpec":
        """Read a spec written by :meth:`write`."""
        data = strict_json.loads(Path(path).read_text(encoding="utf-8"))
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# -- the progress line: the child writes it, the parent shows it -------------------------

def stage_of(done: int, spec: Any, window: tuple[int, int] | None = None) -> dict[str, Any]:
    """``{"stage", "step", "of"}`` after ``done`` step boundaries of a run of ``spec``
    (an :class:`~torchboost.observe.spec.ObserveSpec`); ``window``: the boundaries that start
    and end recording when they moved (a settled warm-up, a time bound; None: the spec's)."""
    start, recorded_end = window if window is not None else (spec.warmup, spec.warmup + spec.steps)
    if done < start:
        return {"stage": "warm-up", "step": done, "of": spec.warmup}
    if done <= recorded_end:
        return {"stage": "observing", "step": done - start, "of": recorded_end - start}
    if done <= recorded_end + spec.profile_steps:
        return {"stage": "profiling", "step": done - recorded_end, "of": spec.profile_steps}
    if not spec.full and spec.profile_steps:  # the replay probe's steps (torchboost.observe.probes.replay)
        return {"stage": "replay", "step": done - recorded_end - spec.profile_steps, "of": REPLAY_STEPS}
    return {"stage": "running", "step": done - start, "of": None}


class ProgressFile:
    """The progress line, rewritten in place with one ``pwrite``: microseconds, no fsync.

    Advisory data for the parent's display: a reader that catches a half-written line
    skips it. Padded to a fixed width so a shorter line leaves no tail of the last one.
    """

    _WIDTH = 96

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)

    def write(self, data: dict[str, Any]) -> None:
        line = json.dumps(data).ljust(self._WIDTH).encode()
        if hasattr(os, "pwrite"):
            os.pwrite(self._fd, line, 0)
        else:  # Windows
            os.lseek(self._fd, 0, os.SEEK_SET)
            os.write(self._fd, line)

    def close(self) -> None:
        os.close(self._fd)


# -- the step count: the child keeps it, the parent reads it after the end ----------------

_FORMAT = "<qq"  # step boundaries done, errno of the last failed facts.json write (0: none)
_SIZE = struct.calcsize(_FORMAT)


@dataclass(frozen=True)
class ChildCount:
    """What the child left in its count file."""

    boundaries: int
    """Step boundaries done."""
    write_errno: int = 0
    """The errno of its last facts.json write when that failed (a full disk), else 0."""


class StepCounter:
    """The child's side: :meth:`set` stores the number of step boundaries done so far,
    :meth:`write_failed` why its last facts.json write failed."""

    def __init__(self, path: str | Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # Written, not truncated to size: the page is allocated now, and a full disk
            # fails here with ENOSPC instead of a SIGBUS at the first store.
            os.pwrite(fd, bytes(_SIZE), 0)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)  # the mapping keeps the file

    def set(self, boundaries: int) -> None:
        """Store ``boundaries`` (about a fifth of a microsecond)."""
        struct.pack_into("<q", self._map, 0, boundaries)

    def write_failed(self, code: int) -> None:
        """The last facts.json write failed with errno ``code`` (0: it succeeded)."""
        struct.pack_into("<q", self._map, 8, code)


def read_count(path: str | Path | None) -> ChildCount | None:
    """The parent's side: what the child stored last; None when it stored nothing."""
    try:
        data = Path(path).read_bytes() if path else b""
    except OSError:
        return None
    return ChildCount(*struct.unpack(_FORMAT, data)) if len(data) == _SIZE else None


def reconcile(facts: Facts, exit_code: int, boundaries: int | None) -> bool:
    """Correct ``facts`` (one process's, not a torchrun job's) with what the parent saw:
    the child's real ``exit_code`` and its last step count. Facts whose last write missed
    the run's end (a count beyond theirs, or another exit code) become ``ended="exited"``
    with the real exit code and step count; a kill or a stall keeps its own words.
    True when anything was corrected."""
    behind = boundaries is not None and boundaries > facts.steps_seen
    if behind:
        facts.steps_seen = boundaries
    if facts.ended in ("killed", "stalled") or facts.world_size > 1:
        return behind
    if behind or exit_code != facts.exit_code:
        facts.ended, facts.exit_code = "exited", exit_code
        return True
    return False
