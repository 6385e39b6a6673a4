"""The step's host side named: checkpoint writes, output and the user's lines, as plain data.

The observer times, in the training thread and outside every phase of the loop (data,
forward, backward, optimizer), each ``torch.save`` (a checkpoint write) and each print,
logging record and write to ``sys.stdout`` / ``sys.stderr`` (output). Their time per step
is in each :class:`~torchboost.evidence.observed.StepRecord` (``checkpoint_ms``,
``output_ms``), carved out of "other"; here is what the phase table cannot say: in which
step each write ran, how long it took and how many bytes it wrote; and, sampled, the
user's own lines where the time went (:mod:`torchboost.evidence.host_lines`).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from torchboost.evidence.host_lines import HostLine

__all__ = ["HostFacts", "MAX_WRITES"]

MAX_WRITES = 1000
"""Checkpoint writes kept in :class:`HostFacts` (the first ones: a long ``--full`` run
saving every step would otherwise grow the facts without end)."""


@dataclass
class HostFacts:
    """Checkpoint writes and output the observer timed outside the loop's phases."""

    checkpoint_steps: list[int] = field(default_factory=list)
    """The step of each checkpoint write, counted as :attr:`StepRecord.index` counts them
    (warm-up included), in order; at most :data:`MAX_WRITES`."""
    checkpoint_ms: list[float] = field(default_factory=list)
    """Each write's time, milliseconds, in the same order."""
    checkpoint_bytes: list[int | None] = field(default_factory=list)
    """Bytes each write wrote (the file's size, or how far a file object's position
    moved: a ``BytesIO``); None where unknown."""
    output_calls: int = 0
    """Outermost output calls (a print, a logging record, a write to sys.stdout or
    sys.stderr) in the recorded steps."""
    lines: list[HostLine] = field(default_factory=list)
    """The user's lines where the sampled time of the recorded steps fell
    (:mod:`torchboost.evidence.host_lines`)."""
    line_interval_ms: float | None = None
    """The line sampler's interval, milliseconds; None when the lines were not sampled."""

    def __post_init__(self) -> None:
        self.lines = [HostLine.from_dict(line) if isinstance(line, dict) else line for line in self.lines]

    def checkpoint_every(self) -> int | None:
        """Steps between checkpoints: the median gap between the steps that wrote one (a step
        that saved the model and the optimizer apart counts once); None under two such steps."""
        steps = sorted(set(self.checkpoint_steps))
        gaps = [b - a for a, b in zip(steps, steps[1:])]
        return round(statistics.median(gaps)) if gaps else None

    def writes_per_checkpoint(self) -> float:
        """``torch.save`` calls per step that wrote any (2.0: the model and the optimizer apart)."""
        steps = set(self.checkpoint_steps)
        return len(self.checkpoint_steps) / len(steps) if steps else 0.0

    def checkpoint_bytes_median(self) -> int | None:
        """Median bytes per checkpoint (all the writes of a step together); None when unknown."""
        per_step: dict[int, int] = {}
        for step, written in zip(self.checkpoint_steps, self.checkpoint_bytes):
            if written is None:
                return None
            per_step[step] = per_step.get(step, 0) + written
        return round(statistics.median(per_step.values())) if per_step else None
