"""What the doctor's child process is told to do: step counts and where to write facts.

The parent writes an :class:`ObserveSpec` to a JSON file and passes that file's path on
the child's command line (never through an environment variable).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchboost._io import atomic_write_bytes

__all__ = ["ObserveSpec", "FACTS_FILE", "TRACE_FILE", "rank_file"]

FACTS_FILE = "facts.json"
"""Name of the facts file inside the output folder."""
TRACE_FILE = "trace.pt.trace.json"
"""Name of the Chrome-trace file inside the output folder (TensorBoard's profiler plugin
opens ``*.pt.trace.json`` files only)."""


def rank_file(name: str, rank: int) -> str:
    """``facts.json`` for rank 0, ``facts.rank1.json`` for rank 1, ... (``trace.rank1.pt.trace.json``)."""
    if rank == 0:
        return name
    stem, dot, suffix = name.partition(".")  # trace.pt.trace.json -> trace.rank1.pt.trace.json
    return f"{stem}.rank{rank}{dot}{suffix}"


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
    full: bool = False
    """Let the script run to its own end, recording every step after warm-up."""
    profile_warmup: int = 1
    """Profiler warm-up steps (recorded by the profiler, then discarded)."""
    profile_active: int = 2
    """Profiler steps kept in the op table and the trace; small keeps the trace small."""
    progress_path: str | None = None
    """File the child rewrites with {"stage", "step", "of"} for the parent's progress line."""
    count_path: str | None = None
    """File the child keeps its step count in, for the parent to read after it ends
    (:mod:`torchboost.observe.step_count`)."""
    flush_interval_s: float = 5.0
    """Least time between two rewrites of facts.json during the run, seconds (each costs
    tens of milliseconds with its fsync; facts are also written when recording ends and
    when the script exits or crashes)."""
    stop_slower_than_ms: float | None = None
    """A tuning trial's bound: once ``SLOW_CHECK_STEPS`` steps are recorded, a median step
    time above this stops the script (a candidate already far slower than the incumbent)."""
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
    """The user's command, as typed, for the facts. (A tuning trial's settings are not
    here: they reach the child once, through :mod:`torchboost.handover`.)"""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be 0 or more, got {self.warmup}")
        if self.profile_active < 0 or self.profile_warmup < 0:
            raise ValueError("profile_warmup and profile_active must be 0 or more")

    def for_rank(self, rank: int) -> "ObserveSpec":
        """This spec for rank ``rank`` of a torchrun job (itself for rank 0)."""
        if rank == 0:
            return self
        return dataclasses.replace(self, rank=rank, progress_path=None, count_path=None)

    @property
    def facts_path(self) -> Path:
        """Where the child writes facts.json (``facts.rankR.json`` for rank R > 0)."""
        return Path(self.out_dir) / rank_file(FACTS_FILE, self.rank)

    @property
    def trace_path(self) -> Path:
        """Where the child writes the Chrome trace (``trace.rankR.pt.trace.json`` for rank R > 0)."""
        return Path(self.out_dir) / rank_file(TRACE_FILE, self.rank)

    @property
    def profile_steps(self) -> int:
        """Steps the profiler window spans (0: no profile)."""
        return self.profile_warmup + self.profile_active if self.profile_active else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return dataclasses.asdict(self)

    def write(self, path: Path) -> None:
        """Write the spec as JSON to ``path``."""
        atomic_write_bytes(Path(path), json.dumps(self.to_dict(), indent=2).encode())

    @classmethod
    def read(cls, path: Path) -> "ObserveSpec":
        """Read a spec written by :meth:`write`."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
