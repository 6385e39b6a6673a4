"""Files the run's processes held open for writing: what changed outside the guard's sight.

The write guard sees Python's file calls. A C library's own writer (a database engine, an
HDF5 or LMDB store, a shell's redirection) changes a file past them. Two looks find such
files: each guarded process names at its end the files it still holds open for writing
(the journal's ``held`` lines, :meth:`~.guard_keeper.Keeper.flush`), and the parent looks
at the whole process tree while it runs (:class:`HeldFiles`, through ``psutil``), which
also sees the processes that never reach their end (a DataLoader worker ends with
``os._exit``, a killed rank with nothing). After the run, :func:`out_of_sight` names every
such file that changed during the run and that nothing put back: "changed outside
torchboost's sight", never blamed on the user.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

import psutil

from torchboost.process.guard.guard_spec import HELD, SCRATCH, USERS

__all__ = ["HeldFile", "HeldFiles", "journal_held", "out_of_sight"]

_EVERY_S = 1.0
_WRITING = frozenset({"w", "a", "r+", "a+", "w+"})


@dataclass(frozen=True)
class HeldFile:
    """A regular file a process of the run held open for writing."""

    path: str
    """Absolute, links resolved."""
    inode: int
    ctime_ns: int | None
    """Its inode's change time when first seen (None: not known): a file first seen
    unchanged since before the run existed before it."""


class HeldFiles:
    """Samples, on a thread of its own, the files every process below this one holds open
    for writing, until :meth:`stop`; :attr:`found` by path."""

    def __init__(self, every_s: float = _EVERY_S,
                 tree: Callable[[], Iterable[psutil.Process]] | None = None) -> None:
        self.found: dict[str, HeldFile] = {}
        self._every_s = every_s
        self._tree = tree or (lambda: psutil.Process().children(recursive=True))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "HeldFiles":
        """Start sampling (a daemon thread: it never keeps torchboost alive)."""
        self._thread = threading.Thread(target=self._run, name="torchboost-held-files", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, HeldFile]:
        """Stop after one last look; what was found."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.sample()
        return self.found

    def _run(self) -> None:
        self.sample()
        while not self._stop.wait(self._every_s):
            self.sample()

    def sample(self) -> None:
        """One look at the tree's open files."""
        try:
            processes = list(self._tree())
        except psutil.Error:
            return
        for process in processes:
            try:
                files = process.open_files()
            except (psutil.Error, OSError):
                continue  # ended, or not ours to read
            for opened in files:
                if getattr(opened, "mode", "r") in _WRITING and opened.path not in self.found:
                    self._note(opened.path)

    def _note(self, raw: str) -> None:
        path = os.path.realpath(raw)
        try:
            st = os.stat(path)
        except OSError:
            return
        self.found.setdefault(path, HeldFile(path, st.st_ino, st.st_ctime_ns))


def journal_held(lines: Iterable[dict]) -> dict[str, HeldFile]:
    """The ``held`` lines of the guard's journal, by path (their first-seen time unknown)."""
    return {line["path"]: HeldFile(line["path"], int(line.get("inode", 0)), None)
            for line in lines if line.get("op") == HELD}


def out_of_sight(held: dict[str, HeldFile], *, started_ns: int, kind: Callable[[str], str],
                 settled: Callable[[str], bool]) -> list[str]:
    """The held files that changed during the run and that nothing put back: outside the
    user's folders the snapshot covered (``settled`` says whether settling already
    restored, moved or named a path), not torchboost's own (``kind``); in scratch, only
    a file first seen unchanged since before the run (else the run made it, and it is its
    own). Sorted paths."""
    named = []
    for path, found in held.items():
        where = kind(path)
        if where not in (USERS, SCRATCH) or settled(path):
            continue
        if where == SCRATCH and (found.ctime_ns is None or found.ctime_ns >= started_ns):
            continue
        try:
            changed = os.stat(path).st_mtime_ns >= started_ns
        except FileNotFoundError:
            changed = found.ctime_ns is not None and found.ctime_ns < started_ns  # it existed, and went
        except OSError:
            continue
        if changed:
            named.append(path)
    return sorted(named)
