"""Checkpoints: written atomically, read with ``weights_only=True``, resumable mid-epoch.

A checkpoint is a plain dict of state dicts. Reading never executes pickled code: a
file holding anything but tensors and plain containers is refused with
:class:`CheckpointError`. The prepared loader's position that a checkpoint keeps is
:class:`~torchboost.techniques.loader.resumable.ResumableLoader`'s (re-exported here).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from torchboost._io import atomic_writer
from torchboost.prepared import BoostedScheduler
from torchboost.techniques.distributed import unwrap_model
from torchboost.techniques.loader.resumable import CheckpointError, ResumableLoader, capture_rng, restore_rng

__all__ = [
    "CheckpointError",
    "ResumableLoader",
    "capture_rng",
    "load_checkpoint",
    "restore_rng",
    "save_checkpoint",
]


def save_checkpoint(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` with ``torch.save``; a crash mid-write leaves the old file intact, and
    a full disk raises :class:`~torchboost._disk.NoSpaceError` saying so (not torch's
    ``RuntimeError ... unexpected pos``)."""
    with atomic_writer(Path(path)) as fh:
        torch.save(state, fh)


def _unpickling_reason(message: str) -> str:
    # torch's message opens with a paragraph about the weights_only default; the line that
    # names what was found ("Unsupported operand 228", "unsupported GLOBAL posix.system")
    # is the reason.
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        if line.lower().startswith(("unsupported", "trying to load")) or "GLOBAL" in line:
            return line
    return lines[0] if lines else "unpickling failed"


def load_checkpoint(path: str | Path, *, map_location: Any = None) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` without running pickled code."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: empty file (a save that never finished?)")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = _unpickling_reason(str(exc))
        if "GLOBAL" not in reason:  # a bad opcode: a garbled file, not a dangerous one
            raise CheckpointError(f"{path}: not a readable checkpoint: truncated or corrupt ({reason})") from None
        raise CheckpointError(
            f"{path}: refused to load: it holds objects other than tensors and plain "
            f"containers, which could run code ({reason})"
        ) from None
    except (RuntimeError, EOFError, KeyError, ValueError, OSError, IndexError) as exc:
        # torch's own words for a cut or garbled file are a RuntimeError about zip
        # archives, a bare EOFError or a KeyError on a pickle opcode.
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint: truncated or corrupt ({detail})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: not a torchboost checkpoint (a {type(state).__name__})")
    return state


# -- a Booster's whole state ------------------------------------------------------------

CHECKPOINT_FORMAT = 1
"""Version of the dict :func:`booster_state` writes."""


def booster_state(prep: Any, *, resolved: Any, model: Any = None, optimizer: Any = None, scheduler: Any = None,
                  extra: dict[str, Any]) -> dict[str, Any]:
    """Everything ``Booster.save`` writes: the user's objects' state dicts, the prepared
    loader's position, the precision policy's state (the fp16 scaler), the optimizer's
    step counts and the resolved configuration. ``prep`` is the Booster's preparation."""
    state: dict[str, Any] = {"format": CHECKPOINT_FORMAT, "extra": extra}
    if prep is not None and prep.prepared_loader is not None:
        state["loader"] = prep.prepared_loader.state_dict()
    if model is not None:
        state["model"] = unwrap_model(model).state_dict()
    for key, target in (("optimizer", optimizer), ("scheduler", scheduler)):
        if target is not None:
            state[key] = target.state_dict()
    if prep is not None:
        state["precision"] = prep.precision.state_dict()
        if prep.prepared_optimizer is not None:
            state["steps"] = prep.prepared_optimizer.step_counts()
    if resolved is not None:
        state["resolved"] = resolved.to_dict()
    return state


def restore_booster_state(path: str | Path, state: dict[str, Any], prep: Any, *, model: Any = None,
                          optimizer: Any = None, scheduler: Any = None) -> dict[str, Any]:
    """Load what :func:`booster_state` wrote into the given objects; returns its ``extra``."""
    wanted = {"model": unwrap_model(model) if model is not None else None, "optimizer": optimizer,
              "scheduler": scheduler}
    for key, target in wanted.items():
        if target is None:
            continue
        if key not in state:
            raise CheckpointError(f"{path}: holds no {key} state")
        target.load_state_dict(state[key])
    if prep is not None:
        if "precision" in state:
            prep.precision.load_state_dict(state["precision"])
        if "steps" in state and prep.prepared_optimizer is not None:
            prep.prepared_optimizer.restore_step_counts(state["steps"])
        if "loader" in state and prep.prepared_loader is not None:
            prep.prepared_loader.load_state_dict(state["loader"])
    if isinstance(scheduler, BoostedScheduler):
        scheduler.sync()  # the restored optimizer steps count as seen
    return dict(state.get("extra", {}))
