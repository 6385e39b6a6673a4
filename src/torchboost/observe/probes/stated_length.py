"""The run's length as the script set it, where the user did not type it.

argparse's defaults (``--epochs`` defaulting to 14 in pytorch/examples' MNIST), nanoGPT's
``max_iters = 5000`` from its config file, a tutorial's ``EPOCHS = 5``, a config
dataclass's or dict's ``max_steps``, a Lightning ``Trainer``'s own plan.
:func:`stated_on_stack` reads them from the script's frames on the call stack while its
loop runs, without changing them (:mod:`~torchboost.reach.frames`): a variable
named as one of :data:`SETTING_NAMES` (any case), or such a field of an
``argparse.Namespace``, a ``SimpleNamespace``, a dataclass or a dict held in one. A
Lightning ``Trainer`` is read from its own ``fit`` on the stack: its ``max_steps``, and its
``max_epochs`` of the batches it takes per epoch (``limit_train_batches``) over
``accumulate_grad_batches``. Where the epochs are written into the loop itself
(``for epoch in range(3): for x, y in tqdm(loader)``), the ``range`` around the loop over
the DataLoader gives them (:mod:`~torchboost.observe.probes.loop_epochs`).

A loop's counter is no length: a step count no larger than the steps already run when it
is read (``total_steps += 1``) is left out.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import types
from dataclasses import dataclass
from typing import Any, Mapping

from torchboost.reach import frames
from torchboost.observe.probes.describe import self_on_stack
from torchboost.observe.probes.loop_epochs import loop_epochs

__all__ = ["EPOCH_FLAGS", "SETTING_NAMES", "STEP_FLAGS", "Stated", "lightning_plan", "stated_on_stack"]

STEP_FLAGS = ("max_iters", "max_iter", "max_steps", "num_steps", "total_steps", "train_steps", "num_iterations",
              "max_train_steps", "num_train_steps", "train_iters", "total_iters", "num_iters", "n_iters", "n_steps",
              "max_iterations", "max_update", "iterations", "iters", "steps")
"""Argument names (without dashes; ``-`` and ``_`` alike) that give the run's steps."""
EPOCH_FLAGS = ("epochs", "num_epochs", "max_epochs", "num_train_epochs", "n_epochs")
"""Argument names that give the run's epochs."""
SETTING_NAMES = (*STEP_FLAGS[:STEP_FLAGS.index("iterations")], *EPOCH_FLAGS)
"""A script's own variable names read as its length: the flags less the ones a loop's counter
is often called (``steps``, ``iters``, ``iterations``)."""
_LIGHTNING = ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer")
_MAX_FIELDS = 512
"""A dict or namespace with more entries than this is no config: not read."""


@dataclass(frozen=True)
class Stated:
    """The run's length as the script set it, each as (written, value): ``("args.epochs = 14", 14)``."""

    steps: tuple[str, int] | None = None
    epochs: tuple[str, float] | None = None
    trainer: tuple[str, int] | None = None
    """A Lightning Trainer's whole plan in optimizer steps, in words: it decides alone."""


def _count(value: Any, whole: bool, field: bool) -> float | None:
    """``value`` as a count: a positive int (a float for epochs, a digit string in a field)."""
    if isinstance(value, str) and field and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
        return None
    if isinstance(value, float) and whole and not value.is_integer():
        return None
    return int(value) if whole else value


def _fields(value: Any) -> Mapping[str, Any]:
    if isinstance(value, (argparse.Namespace, types.SimpleNamespace)):
        found = vars(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        found = {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    elif isinstance(value, dict):
        found = value
    else:
        return {}
    return found if len(found) <= _MAX_FIELDS else {}


def _found_in(scope: Mapping[str, Any], after: int) -> tuple[list[tuple[str, int]], list[tuple[str, float]]]:
    """(steps, epochs) set in one scope, as (written, value); step counts not above ``after``
    (the steps already run: a counter) left out."""
    steps: list[tuple[str, int]] = []
    epochs: list[tuple[str, float]] = []
    for name, value in list(scope.items()):
        if not isinstance(name, str) or name.startswith("__"):
            continue
        found = [(name, name.lower(), value, False)] if name.lower() in SETTING_NAMES else []
        found += [(f"{name}[{key!r}]" if isinstance(value, dict) else f"{name}.{key}", key.lower(), inner, True)
                  for key, inner in list(_fields(value).items())
                  if isinstance(key, str) and key.lower() in (*STEP_FLAGS, *EPOCH_FLAGS)]
        for written, key, inner, field in found:
            count = _count(inner, whole=key not in EPOCH_FLAGS, field=field)
            if count is None or (key not in EPOCH_FLAGS and count <= after):
                continue
            (epochs if key in EPOCH_FLAGS else steps).append((f"{written} = {count:g}", count))  # type: ignore[arg-type]
    return steps, epochs


def stated_on_stack(after: int = 0, frame: types.FrameType | None = None, max_depth: int = 64) -> Stated:
    """The run's length as set in the script's own frames (not the libraries', not
    torchboost's) from ``frame`` (the caller's) outwards, the innermost first, and a
    Lightning Trainer's plan; ``after``: the steps already run (a count not above it is a
    counter). Reads only."""
    frame = frame or sys._getframe(1)
    loop = loop_epochs(frame, max_depth)
    steps: list[tuple[str, int]] = []
    epochs: list[tuple[str, float]] = []
    for _ in range(max_depth):
        if frame is None:
            break
        if frames.is_script_frame(frame):
            for scope in frames.script_names(frame):
                found = _found_in(scope, after)
                steps += found[0]
                epochs += found[1]
        frame = frame.f_back
    named = epochs[0] if epochs else None
    # The loop is what runs: it wins over a setting named like epochs, but where the two
    # agree the setting's words say it (``range(1, args.epochs + 1)``: "args.epochs = 3").
    if loop is not None and (named is None or named[1] != loop[1]):
        named = loop
    return Stated(steps[0] if steps else None, named, lightning_plan())


def lightning_plan() -> tuple[str, int] | None:
    """(words, optimizer steps) of the Lightning Trainer whose ``fit`` is on the stack; None
    when there is none, or its plan is open-ended."""
    kinds = [getattr(sys.modules.get(name), "Trainer", None) for name in _LIGHTNING]
    trainer = next((t for t in (self_on_stack(k, 96) for k in kinds if k is not None) if t is not None), None)
    if trainer is None:
        return None
    max_steps, max_epochs = int(getattr(trainer, "max_steps", -1) or -1), getattr(trainer, "max_epochs", None)
    batches, accumulate = getattr(trainer, "num_training_batches", None), getattr(trainer, "accumulate_grad_batches", 1)
    plans = [(max_steps, f"the Lightning Trainer's max_steps={max_steps}")] if max_steps > 0 else []
    if max_epochs and max_epochs > 0 and isinstance(batches, int) and batches > 0:
        per_epoch = math.ceil(batches / max(1, int(accumulate or 1)))
        words = f"the Lightning Trainer's max_epochs={max_epochs} of {batches} batches"
        plans.append((max_epochs * per_epoch, words + (f" over accumulate_grad_batches={accumulate}"
                                                       if per_epoch != batches else "")))
    if not plans:
        return None
    steps, words = min(plans)
    return words, steps
