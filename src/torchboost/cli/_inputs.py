"""Checks of the command line's own values, made before any work starts."""

from __future__ import annotations

import math
import os
from pathlib import Path

from torchboost.observe.launch import UsageError

__all__ = ["check_out_dir", "check_seconds"]


def check_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """``path`` as a report folder we can write: created when missing; UsageError otherwise."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {out}: a file, not a folder; name a folder for the report")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {out}: cannot create it ({exc.strerror or exc})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {out}: not writable")
    return out


def check_seconds(value: float, flag: str) -> float:
    """A finite, positive number of seconds; UsageError otherwise (nan, inf, 0, negative)."""
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag} must be a finite number of seconds above 0, got {value}")
    return value
