"""The planned run's length from the script's own arguments and settings, where a user would look.

nanoGPT takes ``--max_iters=400``, many scripts ``--max-steps 1000`` or ``--epochs 3``. A
step count is the run's length; epochs count only with the loader's length (batches per
epoch). Both ``--flag=N`` and ``--flag N`` are read; the last one given wins, as with
argparse.

What the user did not type, the script still set: argparse's defaults (``--epochs``
defaulting to 14 in pytorch/examples' MNIST), nanoGPT's ``max_iters = 5000`` from its config
file, a ``max_steps`` field of a config dataclass. :func:`stated_on_stack` reads them, read
only, from the script's own frames on the call stack while its loop runs: a local or global
of one of :data:`SETTING_NAMES`, or a field of an ``argparse.Namespace``, a
``SimpleNamespace``, a dataclass or a Lightning ``Trainer`` (``max_steps``,
``max_epochs``) held in one.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import sysconfig
import types
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["EPOCH_FLAGS", "SETTING_NAMES", "STEP_FLAGS", "Stated", "length_from_arguments", "script_arguments",
           "stated_on_stack"]

STEP_FLAGS = ("max_iters", "max_iter", "max_steps", "num_steps", "total_steps", "train_steps", "num_iterations",
              "max_train_steps", "num_train_steps", "train_iters", "total_iters", "num_iters", "n_iters", "n_steps",
              "max_iterations", "max_update", "iterations", "iters", "steps")
"""Argument names (without dashes; ``-`` and ``_`` alike) that give the run's steps."""
EPOCH_FLAGS = ("epochs", "num_epochs", "max_epochs", "num_train_epochs", "n_epochs")
"""Argument names that give the run's epochs."""
SETTING_NAMES = (*STEP_FLAGS[:STEP_FLAGS.index("iterations")], *EPOCH_FLAGS)
"""A script's own variable names read as its length: the flags less the ones a loop's counter
is often called (``steps``, ``iters``, ``iterations``)."""


_LIGHTNING = ("lightning.", "pytorch_lightning.")


@dataclass(frozen=True)
class Stated:
    """The run's length as the script set it, each as (written, value): ``("args.epochs = 14", 14)``."""

    steps: tuple[str, int] | None = None
    epochs: tuple[str, int] | None = None


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


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _fields(value: Any) -> dict[str, Any]:
    if isinstance(value, (argparse.Namespace, types.SimpleNamespace)):
        return vars(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    if type(value).__module__.startswith(_LIGHTNING) and type(value).__name__ == "Trainer":
        return {"max_steps": value.max_steps, "max_epochs": value.max_epochs}
    return {}


def _stated_in(scope: dict[str, Any]) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(steps, epochs) found in one frame's variables, as (written, value)."""
    steps, epochs = [], []
    for name, value in list(scope.items()):
        found = [(name, value)] if name in SETTING_NAMES else []
        found += [(f"{name}.{key}", inner) for key, inner in _fields(value).items()
                  if key in STEP_FLAGS or key in EPOCH_FLAGS]
        for written, inner in found:
            count = _count(inner)
            if count is not None:
                key = written.rpartition(".")[2]
                (epochs if key in EPOCH_FLAGS else steps).append((f"{written} = {count}", count))
    return steps, epochs


def _libraries() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return tuple(os.path.abspath(p) + os.sep for p in {paths["stdlib"], paths["purelib"], paths["platlib"], here})


def stated_on_stack(frame: types.FrameType | None = None, max_depth: int = 64) -> Stated:
    """The run's length as set in the script's own frames (not the libraries', not
    torchboost's) from ``frame`` (the caller's) outwards, the innermost first; read only."""
    frame = frame or sys._getframe(1)
    libraries, steps, epochs = _libraries(), [], []
    for _ in range(max_depth):
        if frame is None:
            break
        path = frame.f_code.co_filename
        if not path.startswith("<") and not os.path.abspath(path).startswith(libraries):
            for scope in (frame.f_locals, frame.f_globals):
                found = _stated_in(scope)
                steps += found[0]
                epochs += found[1]
        frame = frame.f_back
    return Stated(steps[0] if steps else None, epochs[0] if epochs else None)


def _epochs(written: str, value: int, batches_per_epoch: int, batches_per_step: int) -> tuple[int, str]:
    words = f"the script's {written} x {batches_per_epoch} batches per epoch"
    if batches_per_step > 1:
        return (max(1, value * batches_per_epoch // batches_per_step),
                f"{words}, {batches_per_step} to an optimizer step")
    return value * batches_per_epoch, words


def length_from_arguments(argv: Sequence[str], batches_per_epoch: int | None,
                          batches_per_step: int = 1, stated: Stated = Stated()) -> tuple[int, str] | None:
    """(steps, what gave them in words) from the script's arguments ``argv`` (the words
    after the script's path), else from what the script set (``stated``: its defaults);
    None when neither says. A step count is taken as the script's optimizer steps; epochs
    are ``batches_per_epoch`` batches each, ``batches_per_step`` of them to an optimizer
    step (accumulation). What the user typed comes first, a step count before epochs."""
    typed_steps, typed_epochs = _values(argv, STEP_FLAGS), _values(argv, EPOCH_FLAGS)
    for steps, epochs in ((typed_steps[-1:], typed_epochs[-1:]), ([stated.steps] if stated.steps else [],
                                                                   [stated.epochs] if stated.epochs else [])):
        if steps:
            return steps[0][1], f"the script's {steps[0][0]}"
        if epochs and batches_per_epoch:
            return _epochs(*epochs[0], batches_per_epoch, batches_per_step)
    return None
