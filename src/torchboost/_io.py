"""Atomic file writes: the one place torchboost replaces a file on disk."""

from __future__ import annotations

import contextlib
import glob
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import BinaryIO, Iterator

from torchboost._disk import NO_SPACE, NoSpaceError, os_error_in

__all__ = ["atomic_write_bytes", "atomic_writer"]


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """Yield a binary file that replaces ``path`` only when the block ends without error.

    The data goes to a temporary file in the same directory, is flushed and fsync'd,
    then ``os.replace`` swaps it in; an exception leaves any previous ``path`` intact and
    removes the temporary file (a full disk raises :class:`~torchboost._disk.NoSpaceError`,
    which names the device). The file keeps the mode it had (a new file gets the
    umask's, as ``open`` would give it). A temporary file left by a killed writer is
    removed by the next write of the same path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, _mode_for(path))
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        full = os_error_in(exc)
        if full is not None and full.errno in NO_SPACE and not isinstance(exc, NoSpaceError):
            raise NoSpaceError(path, full.errno) from exc  # says where, in one line
        raise
    _fsync_dir(path.parent)


_SUFFIX = ".tmp"
_STALE_S = 60.0
"""A temporary file of ours untouched this long belongs to a writer that was killed."""


def _mode_for(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _remove_stale(path: Path) -> None:
    now = time.time()
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*{_SUFFIX}"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > _STALE_S:
                tmp.unlink()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_writer`)."""
    with atomic_writer(path) as fh:
        fh.write(data)


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not every platform lets a directory be opened.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
