"""One tune at a time in a report folder: a lock held for the whole command.

Two tunes sharing a report folder would clear each other's trial files (each trial's
``facts.json`` is written to the same place) and fail in ways that name neither. The
first takes ``.torchboost-tune.lock`` in the folder with ``flock``, which the system
drops when the process ends however it ends (a killed tune leaves no stale lock); the
second is told at once, before any work. The lock file goes with the tune that held it:
removed as the block ends, before the lock is dropped (a killed tune's file is left, and
the next tune takes it over).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from torchboost._disk import NO_SPACE, NoSpaceError
from torchboost.usage import UsageError

__all__ = ["LOCK_NAME", "folder_lock"]

LOCK_NAME = ".torchboost-tune.lock"
"""The lock file's name in the report folder; it holds the locking process's id."""


@contextlib.contextmanager
def folder_lock(folder: Path, flag: str = "--out") -> Iterator[None]:
    """Hold the folder's lock for the block; :class:`UsageError` when another process holds it."""
    path = Path(folder) / LOCK_NAME
    created = not path.exists()
    fd = _locked(path, folder, flag)
    try:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        except OSError as exc:
            if created:  # a lock that holds no process id is no use to the next tune: no 0-byte file left
                with contextlib.suppress(OSError):
                    path.unlink()
            if exc.errno in NO_SPACE:
                raise NoSpaceError(path, exc.errno) from None
            raise
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                path.unlink()  # still held: no other tune can be using this file
    finally:
        os.close(fd)  # closing drops the lock


def _locked(path: Path, folder: Path, flag: str) -> int:
    """The lock file's descriptor, locked; a file its holder removed as we took it (it ends
    by removing it) is not the lock any more, so the new one is taken."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            who = f" (process {holder})" if holder.isdigit() else ""
            raise UsageError(f"{flag} {folder}: another torchboost tune is running in this folder{who}; "
                             f"wait for it to end, or give this one another {flag}") from None
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)
