"""A write that failed because the disk is full, said in one line: where, and how much is free.

torchboost writes reports, facts, traces, checkpoints and ``torchboost.toml``; on a full
filesystem (or one over its quota) each raises :class:`NoSpaceError`, whose message names
the device and its mount point, and the CLI prints it as one line. Writers remove their
temporary files first (:mod:`torchboost._io`), so a failed write leaves none behind.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import psutil

__all__ = ["NO_SPACE", "NoSpaceError", "os_error_in", "no_space_words"]

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errno values of a full filesystem: no space left, disk quota exceeded."""


class NoSpaceError(OSError):
    """Writing ``path`` failed: its filesystem is full. ``str()`` is the one-line message."""

    def __init__(self, path: str | Path, code: int = errno.ENOSPC) -> None:
        super().__init__(code, os.strerror(code), str(path))
        self.path = Path(path)

    def __str__(self) -> str:
        return no_space_words(self.path)


def os_error_in(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc``: itself, or one in its chain of causes and contexts
    (``torch.save`` reports a failed write as a RuntimeError raised while handling it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def no_space_words(path: str | Path) -> str:
    """"no space left on DEVICE (mounted at M, N bytes free) to write PATH; ..."."""
    where = Path(path).absolute()
    device, mount = _device_of(where)
    try:
        free = f", {shutil.disk_usage(mount).free:,} bytes free"
    except OSError:
        free = ""
    return (f"no space left on {device} (mounted at {mount}{free}) to write {where}; "
            "free some space there, or write elsewhere")


def _device_of(path: Path) -> tuple[str, str]:
    """(device, mount point) of the filesystem holding ``path``: the longest mount point above it."""
    best = ("the device", "/")
    try:
        partitions = psutil.disk_partitions(all=True)
    except (OSError, psutil.Error):
        return best
    length = -1
    for part in partitions:
        mount = part.mountpoint
        if (path == Path(mount) or Path(mount) in path.parents) and len(mount) > length:
            best, length = (part.device or part.fstype or "the device", mount), len(mount)
    return best
