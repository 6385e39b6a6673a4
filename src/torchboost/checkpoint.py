"""Checkpoints: written atomically, read with ``weights_only=True``.

A checkpoint is a plain dict of state dicts. Reading never executes pickled code: a
file holding anything but tensors and plain containers is refused with
:class:`CheckpointError`.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from torchboost._io import atomic_writer

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint"]


class CheckpointError(RuntimeError):
    """A checkpoint could not be read safely, or lacks what was asked of it."""


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` with ``torch.save``; a crash mid-write leaves the old file intact."""
    with atomic_writer(Path(path)) as fh:
        torch.save(state, fh)


def load_checkpoint(path: str | Path, *, map_location: Any = None) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` without running pickled code."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"{path}: refused to load: it holds objects other than tensors and plain "
            f"containers, which could run code ({first})"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a torchboost checkpoint (a {type(state).__name__})")
    return state
