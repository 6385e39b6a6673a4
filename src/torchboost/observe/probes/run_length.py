"""The planned run's length from the script's own arguments and settings, where a user would look.

nanoGPT takes ``--max_iters=400``, many scripts ``--max-steps 1000`` or ``--epochs 3``.
Both ``--flag=N`` and ``--flag N`` are read; the last one given wins, as with argparse.
What the user did not type, the script may still have set (its defaults, its config:
:mod:`~torchboost.observe.probes.stated_length`); what was typed comes first, of each kind.

A step count and epochs (of the loader's batches, over the accumulation) may both be set:
the run ends at the first of the two, as a loop over epochs capped at ``max_steps`` does
(and a Lightning Trainer), so the smaller is the run. A step count equal to one epoch's
steps is the epoch's length (``num_steps = len(loader)``), not the run's.
"""

from __future__ import annotations

import math
from typing import Sequence

from torchboost.observe.probes.stated_length import EPOCH_FLAGS, STEP_FLAGS, Stated

__all__ = ["length_from_arguments", "script_arguments"]


def script_arguments(command: Sequence[str]) -> list[str]:
    """The words of ``command`` after the script (``train.py``) or module (``-m pkg.train``)."""
    for i, word in enumerate(command):
        if word == "-m":
            return list(command[i + 2:])
        if word.endswith(".py"):
            return list(command[i + 1:])
    return []


def _values(argv: Sequence[str], names: tuple[str, ...]) -> list[tuple[str, int]]:
    """(as written, value) of every ``--name=N`` / ``--name N`` in ``argv`` with a whole number."""
    found = []
    for i, word in enumerate(argv):
        if not word.startswith("--"):
            continue
        flag, eq, value = word.partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        if flag[2:].replace("-", "_") in names and value.isdigit() and int(value) > 0:
            found.append((f"{flag}={value}", int(value)))
    return found


def _by_epochs(written: str, value: float, batches_per_epoch: int, batches_per_step: int) -> tuple[int, str]:
    words = f"the script's {written} x {batches_per_epoch} batches per epoch"
    if batches_per_step > 1:
        return (max(1, math.ceil(value * batches_per_epoch) // batches_per_step),
                f"{words}, {batches_per_step} to an optimizer step")
    return math.ceil(value * batches_per_epoch), words


def length_from_arguments(argv: Sequence[str], batches_per_epoch: int | None,
                          batches_per_step: int = 1, stated: Stated = Stated()) -> tuple[int, str] | None:
    """(steps, what gave them in words) from the script's arguments ``argv`` (the words
    after the script's path), else from what the script set (``stated``); None when neither
    says. A step count is taken as the script's optimizer steps; epochs are
    ``batches_per_epoch`` batches each, ``batches_per_step`` of them to an optimizer step
    (accumulation). With both, the smaller (see the module docstring)."""
    typed_steps, typed_epochs = _values(argv, STEP_FLAGS)[-1:], _values(argv, EPOCH_FLAGS)[-1:]
    steps = typed_steps[0] if typed_steps else stated.steps
    epochs = typed_epochs[0] if typed_epochs else stated.epochs
    by_epochs = _by_epochs(*epochs, batches_per_epoch, batches_per_step) if epochs and batches_per_epoch else None
    if steps is None or by_epochs is None or epochs is None:
        return by_epochs if steps is None else (steps[1], f"the script's {steps[0]}")
    by_steps = (steps[1], f"the script's {steps[0]}")
    if epochs[1] > 1 and abs(steps[1] - by_epochs[0] / epochs[1]) < 1:
        return by_epochs  # one epoch's steps: the loop's per-epoch count
    if by_steps[0] == by_epochs[0]:
        return by_steps
    low, high = sorted([by_steps, by_epochs])
    return low[0], f"{low[1]}, which ends it before {high[1]} would"
