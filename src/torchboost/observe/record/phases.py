"""The names the observer's parts share: a step's phases, what a closed step was, how a run stops.

Kept apart from :mod:`torchboost.observe.record.recorder` so that its parts (step timing, loss
capture) and the hooks can use them without importing the recorder itself.
"""

from __future__ import annotations

__all__ = ["DATA", "FORWARD", "BACKWARD", "OPTIMIZER", "CHECKPOINT", "OUTPUT", "PHASE_MARKS", "RECORDED", "WARMUP", "SLOW_CHECK_STEPS",
           "StopObserving"]

DATA, FORWARD, BACKWARD, OPTIMIZER, CHECKPOINT, OUTPUT = range(6)
"""Phase indices into a step's accumulators (see ``torchboost.evidence.observed.PHASES``):
the loop's four, then the host's calls timed outside them (``torch.save``; printing and logging)."""

PHASE_MARKS = ("torchboost: data wait", "torchboost: forward", "torchboost: backward", "torchboost: optimizer",
               "torchboost: checkpoint write", "torchboost: output")
"""The trace's mark for each phase: constant strings, so none is built per phase on the hot path."""

RECORDED, WARMUP = "recorded", "warm-up"
"""What a closed step was kept as (a step of neither kind is not kept)."""

SLOW_CHECK_STEPS = 5
"""Recorded steps after which a tuning trial may be stopped as far too slow."""


class StopObserving(SystemExit):
    """Ends the observed script at a step boundary once enough steps were seen.

    Not an ``Exception``, so the script's ``finally`` blocks run and its ``except
    Exception`` does not swallow it; a ``SystemExit`` with no code, so that where nothing
    of torchboost's catches it (a process of a command's tree: a launcher's worker, a
    rank ``torch.multiprocessing`` spawned) the process leaves quietly with status 0, and
    its launcher goes on as after a finished run.
    """
