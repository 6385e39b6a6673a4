"""When a file was made: its birth time, where the filesystem keeps one (Linux's ``statx``).

The write guard takes a file made before the run for the user's and keeps its original
before the first change. A file's change time (``st_ctime``) says it only until anything
touches the inode: another process's ``touch``, ``chmod`` or new hard link moves it to
now, and the file then looked the run's, its original not kept. The birth time moves for
none of those. Read through ``statx`` with ``ctypes`` (standard library only: the guard
starts before the script imports anything); None where the system or the filesystem has
none, and the caller falls back on the change time.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["birth_ns"]

_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_STATX_BTIME = 0x800


class _Timestamp(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_uint32), ("_reserved", ctypes.c_int32)]


class _Statx(ctypes.Structure):
    _fields_ = [("mask", ctypes.c_uint32), ("blksize", ctypes.c_uint32), ("attributes", ctypes.c_uint64),
                ("nlink", ctypes.c_uint32), ("uid", ctypes.c_uint32), ("gid", ctypes.c_uint32),
                ("mode", ctypes.c_uint16), ("_spare0", ctypes.c_uint16), ("ino", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("blocks", ctypes.c_uint64), ("attributes_mask", ctypes.c_uint64),
                ("atime", _Timestamp), ("btime", _Timestamp), ("ctime", _Timestamp), ("mtime", _Timestamp),
                ("_rest", ctypes.c_uint64 * 16)]


def _statx() -> object | None:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "statx", None)
    except OSError:
        return None


_CALL = _statx()


def birth_ns(path: str) -> int | None:
    """``path``'s birth time (its own, links not followed), ns since the epoch; None where
    unknown (no ``statx``, a filesystem that keeps none, a path that cannot be read)."""
    if _CALL is None:
        return None
    found = _Statx()
    if _CALL(_AT_FDCWD, os.fsencode(path), _AT_SYMLINK_NOFOLLOW, _STATX_BTIME, ctypes.byref(found)) != 0:
        return None
    if not found.mask & _STATX_BTIME or found.btime.tv_sec <= 0:
        return None
    return found.btime.tv_sec * 1_000_000_000 + found.btime.tv_nsec
