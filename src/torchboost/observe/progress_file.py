"""The doctor's progress line, shared between the observed script and its parent."""

from __future__ import annotations

import json
import os
from typing import Any

from torchboost.observe.probes.replay import REPLAY_STEPS

__all__ = ["ProgressFile", "stage_of"]


def stage_of(done: int, spec: Any) -> dict[str, Any]:
    """``{"stage", "step", "of"}`` after ``done`` step boundaries of a run of ``spec``
    (an :class:`~torchboost.observe.spec.ObserveSpec`)."""
    recorded_end = spec.warmup + spec.steps
    if done < spec.warmup:
        return {"stage": "warm-up", "step": done, "of": spec.warmup}
    if done <= recorded_end:
        return {"stage": "observing", "step": done - spec.warmup, "of": spec.steps}
    if done <= recorded_end + spec.profile_steps:
        return {"stage": "profiling", "step": done - recorded_end, "of": spec.profile_steps}
    if not spec.full and spec.profile_steps:  # the replay probe's steps (torchboost.observe.probes.replay)
        return {"stage": "replay", "step": done - recorded_end - spec.profile_steps, "of": REPLAY_STEPS}
    return {"stage": "running", "step": done - spec.warmup, "of": None}


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
