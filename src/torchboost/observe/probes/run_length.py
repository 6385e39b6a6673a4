"""The planned run's length from the script's own arguments, where a user would look.

nanoGPT takes ``--max_iters=400``, many scripts ``--max-steps 1000`` or ``--epochs 3``. A
step count is the run's length; epochs count only with the loader's length (batches per
epoch). Both ``--flag=N`` and ``--flag N`` are read; the last one given wins, as with
argparse.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["EPOCH_FLAGS", "STEP_FLAGS", "length_from_arguments", "script_arguments"]

STEP_FLAGS = ("max_iters", "max_iter", "max_steps", "num_steps", "total_steps", "train_steps", "num_iterations",
              "iterations", "iters", "steps")
"""Argument names (without dashes; ``-`` and ``_`` alike) that give the run's steps."""
EPOCH_FLAGS = ("epochs", "num_epochs", "max_epochs", "num_train_epochs", "n_epochs")
"""Argument names that give the run's epochs."""


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


def length_from_arguments(argv: Sequence[str], batches_per_epoch: int | None,
                          batches_per_step: int = 1) -> tuple[int, str] | None:
    """(steps, what gave them in words) from the script's arguments ``argv`` (the words
    after the script's path); None when they do not say. A step count is taken as the
    script's optimizer steps; epochs are ``batches_per_epoch`` batches each,
    ``batches_per_step`` of them to an optimizer step (accumulation)."""
    steps = _values(argv, STEP_FLAGS)
    if steps:
        written, value = steps[-1]
        return value, f"the script's {written}"
    epochs = _values(argv, EPOCH_FLAGS)
    if epochs and batches_per_epoch:
        written, value = epochs[-1]
        words = f"the script's {written} x {batches_per_epoch} batches per epoch"
        if batches_per_step > 1:
            return (max(1, value * batches_per_epoch // batches_per_step),
                    f"{words}, {batches_per_step} to an optimizer step")
        return value * batches_per_epoch, words
    return None
