"""The child's step count, kept where its parent can read it whatever way the child ends.

``facts.json`` is written at the first recorded step, every few seconds, and at the
script's end; a script that ends its process itself (``os._exit(3)``, a native library's
``exit``) skips that last write, and its facts would say what did not happen: "finished",
exit code 0, the steps of the last write. So at every step boundary the child also stores
the count of boundaries in an 8-byte shared file mapping (a store into memory, no system
call), which the kernel keeps when the process ends, however it ends. After the child has
gone, the parent reads the count and, with the exit status it saw itself, corrects the
facts (:func:`reconcile`) and rewrites ``facts.json``: the parent's word on how the
run ended is the last. The same file carries the errno of a facts.json write that failed
(a full disk), so the parent says the disk is full rather than that no step was seen.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from torchboost.evidence.observed import Facts

__all__ = ["ChildCount", "StepCounter", "read_count", "reconcile"]

_FORMAT = "<qq"  # step boundaries done, errno of the last failed facts.json write (0: none)
_SIZE = struct.calcsize(_FORMAT)


@dataclass(frozen=True)
class ChildCount:
    """What the child left in its count file."""

    boundaries: int
    """Step boundaries done."""
    write_errno: int = 0
    """The errno of its last facts.json write when that failed (a full disk), else 0."""


class StepCounter:
    """The child's side: :meth:`set` stores the number of step boundaries done so far,
    :meth:`write_failed` why its last facts.json write failed."""

    def __init__(self, path: str | Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # Written, not truncated to size: the page is allocated now, and a full disk
            # fails here with ENOSPC instead of a SIGBUS at the first store.
            os.pwrite(fd, bytes(_SIZE), 0)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)  # the mapping keeps the file

    def set(self, boundaries: int) -> None:
        """Store ``boundaries`` (about a fifth of a microsecond)."""
        struct.pack_into("<q", self._map, 0, boundaries)

    def write_failed(self, code: int) -> None:
        """The last facts.json write failed with errno ``code`` (0: it succeeded)."""
        struct.pack_into("<q", self._map, 8, code)


def read_count(path: str | Path | None) -> ChildCount | None:
    """The parent's side: what the child stored last; None when it stored nothing."""
    try:
        data = Path(path).read_bytes() if path else b""
    except OSError:
        return None
    return ChildCount(*struct.unpack(_FORMAT, data)) if len(data) == _SIZE else None


def reconcile(facts: Facts, exit_code: int, boundaries: int | None) -> bool:
    """Correct ``facts`` (one process's, not a torchrun job's) with what the parent saw:
    the child's real ``exit_code`` and its last step count. Facts whose last write missed
    the run's end (a count beyond theirs, or another exit code) become ``ended="exited"``
    with the real exit code and step count; a kill or a stall keeps its own words.
    True when anything was corrected."""
    behind = boundaries is not None and boundaries > facts.steps_seen
    if behind:
        facts.steps_seen = boundaries
    if facts.ended in ("killed", "stalled") or facts.world_size > 1:
        return behind
    if behind or exit_code != facts.exit_code:
        facts.ended, facts.exit_code = "exited", exit_code
        return True
    return False
