"""The child's step count, kept where its parent can read it whatever way the child ends.

``facts.json`` is written at the first recorded step, every few seconds, and at the
script's end; a script that ends its process itself (``os._exit(3)``, a native library's
``exit``) skips that last write, and its facts would say what did not happen: "finished",
exit code 0, the steps of the last write. So at every step boundary the child also stores
the count of boundaries in an 8-byte shared file mapping (a store into memory, no system
call), which the kernel keeps when the process ends, however it ends. After the child has
gone, the parent reads the count and, with the exit status it saw itself, corrects the
facts (:func:`reconcile`) and rewrites ``facts.json``: the parent's word on how the
run ended is the last.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from torchboost.evidence.observed import Facts

__all__ = ["StepCounter", "read_count", "reconcile"]

_FORMAT = "<q"
_SIZE = struct.calcsize(_FORMAT)


class StepCounter:
    """The child's side: :meth:`set` stores the number of step boundaries done so far."""

    def __init__(self, path: str | Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)  # the mapping keeps the file

    def set(self, boundaries: int) -> None:
        """Store ``boundaries`` (about a fifth of a microsecond)."""
        struct.pack_into(_FORMAT, self._map, 0, boundaries)


def read_count(path: str | Path | None) -> int | None:
    """The parent's side: the last count the child stored; None when it stored none."""
    try:
        data = Path(path).read_bytes() if path else b""
    except OSError:
        return None
    return struct.unpack(_FORMAT, data)[0] if len(data) == _SIZE else None


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
