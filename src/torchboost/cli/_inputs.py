"""Checks of the command line's own values, made before any work starts."""

from __future__ import annotations

import contextlib
import math
import os
import re
from pathlib import Path

from torchboost import out_folder
from torchboost._disk import NO_SPACE, NoSpaceError
from torchboost.usage import UsageError

__all__ = ["check_out_dir", "check_seconds", "check_writable_file", "parse_size", "SIZE_UNITS"]


def check_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """``path`` as a report folder we can write: new, empty or torchboost's own, made and
    marked when missing (:func:`torchboost.out_folder.claim`), writable, with room for a
    report; UsageError (NoSpaceError for a full disk) otherwise. Ask it after every other
    check of the command's input: it makes the folder."""
    return out_folder.claim(path, flag, usable=lambda out: _usable(out, flag))


def _usable(out: Path, flag: str) -> None:
    if not os.access(out, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {out}: not writable")
    _probe_space(out)


_PROBE_BYTES = 64 * 1024
"""What the report folder must take at once: a facts file and a report's first lines."""


def _probe_space(folder: Path) -> None:
    """Write and remove a small file in ``folder``: a full filesystem is said now, naming the
    folder's own device (:class:`~torchboost._disk.NoSpaceError`), before any work, and no
    file is left behind either way."""
    probe = folder / ".torchboost-space-check"
    try:
        with open(probe, "wb") as fh:
            fh.write(b"\0" * _PROBE_BYTES)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        if exc.errno in NO_SPACE:
            raise NoSpaceError(folder, exc.errno) from None
        raise
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def check_writable_file(path: str | Path, flag: str = "--config") -> Path:
    """``path`` as a file tune can write at the end (it and its ``.bak`` beside it), tried
    now: opened for appending when it exists (nothing is written; an immutable or read-only
    file refuses), else a probe file created and removed in its folder. UsageError otherwise."""
    target = Path(path)
    try:
        if target.exists():
            with open(target, "a", encoding="utf-8"):
                pass
        probe = target.with_name(f".{target.name}.torchboost-write-check")
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{flag} {target}: cannot be written ({exc.strerror or exc}); tune writes it at the end, "
                         "so it checks first") from None
    return target


def check_seconds(value: float, flag: str) -> float:
    """A finite, positive number of seconds; UsageError otherwise (nan, inf, 0, negative)."""
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag} must be a finite number of seconds above 0, got {value}")
    return value


SIZE_UNITS = {"": 1, "b": 1,
              "k": 2**10, "kib": 2**10, "m": 2**20, "mib": 2**20, "g": 2**30, "gib": 2**30, "t": 2**40, "tib": 2**40,
              "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
"""Bytes per unit of a size, lower case: K, M, G, T and KiB... are powers of 1024 (as
``docker --memory`` and ``java -Xmx`` read them), KB, MB, GB, TB powers of 1000."""

_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)")


def parse_size(text: str, flag: str) -> int:
    """A memory size in bytes: ``12GiB``, ``800MB``, ``2048M``, ``1.5G`` or a byte count
    (units in :data:`SIZE_UNITS`, any case); UsageError otherwise (no number, an unknown
    unit, 0 or less)."""
    match = _SIZE.fullmatch(text.strip())
    unit = SIZE_UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise UsageError(f"{flag} expects a size like 12GiB, 800MB, 2048M or a number of bytes, got {text!r}")
    size = round(float(match.group(1)) * unit)
    if size < 1:
        raise UsageError(f"{flag} must be above 0 bytes, got {text!r}")
    return size
