"""The write guard's bookkeeping: which paths are the user's, their originals kept, the journal.

:class:`~torchboost.process.guard.write_guard.WriteGuard` decides *when* a path is about to
change; this module keeps its original and writes the journal lines
(:mod:`torchboost.process.guard.guard_spec` describes them). Everything here runs with the
guard's wrappers switched off for the calling thread, so its own renames, links and copies
go straight to the OS.

Whose is a path: one this process created or already kept is the run's; otherwise a file
born (:func:`~.birth_time.birth_ns`; where the filesystem keeps no birth time, whose inode
changed, ``st_ctime_ns``) at or after the run started was made by another process of the
run (a DataLoader worker, a torchrun rank); an older one is the user's. A
folder's ctime changes with every entry added, so a folder of the user's places is taken
to be the user's unless this process made it, and the parent's snapshot has the last word;
in the temp directory and the caches (scratch) only files are kept, and a folder a user's
file was in is made again when the file goes back.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from typing import Any

from torchboost.process.guard.birth_time import birth_ns
from torchboost.process.guard.guard_spec import (COPIES_DIR, CREATED, EXEMPT, HELD, KEPT, TIMES, UNPROTECTED, USERS,
                                                 WROTE, WriteGuardSpec, journal_path, written_files)

__all__ = ["Keeper", "MOVE", "COPY", "LINK"]

MOVE = "move"
"""The path is about to be made anew (open "w", torch.save): rename the original away."""
COPY = "copy"
"""The file is about to change in place (append, "r+", truncate): copy it first."""
LINK = "link"
"""The entry is about to go (unlink, rename away, replaced): hard-link the original."""

_COUNT_EVERY_LINE = 100
"""Writes of one path journaled one line each; past this, at powers of two (and at exit)."""


class Keeper:
    """Keeps originals and journals the run's changes, for one guard in one process tree."""

    def __init__(self, spec: WriteGuardSpec) -> None:
        self._dir = spec.journal_dir
        self._started_ns = spec.started_ns
        self._kept: set[str] = set()
        self._created: set[str] = set()
        self._timed: set[str] = set()
        self._wrote: dict[str, int] = {}
        self._journaled: dict[str, int] = {}
        self._fd: int | None = None
        self._pid = 0
        self._seq = 0
        self._lock = threading.RLock()
        self._rules = spec.rules()
        self._own = spec.own
        self.inherited: set[int] = set()
        """Inodes of the files this process was started holding open for writing (its
        standard output sent to a file): named by the parent, not at this process's end."""

    def kind(self, path: str) -> str:
        """The kind of place ``path`` (absolute, resolved) is in: USERS, SCRATCH or EXEMPT
        (:meth:`WriteGuardSpec.rules`; torchboost's own report entries first)."""
        if self._own.holds(path):
            return EXEMPT
        probe = path + os.sep
        for prefix, kind in self._rules:
            if probe.startswith(prefix):
                return kind
        return USERS

    def guarded(self, path: str) -> bool:
        """Whether changes to ``path`` (absolute, resolved) are journaled at all."""
        return self.kind(path) != EXEMPT

    def is_kept(self, path: str) -> bool:
        """Whether this process kept the original of ``path``."""
        return path in self._kept

    def after_fork(self) -> None:
        """In a forked child: a lock of its own, and a journal file of its own on the next line."""
        self._lock = threading.RLock()

    # -- before a change ----------------------------------------------------------------------
    def before_change(self, path: str, how: str) -> str | None:
        """Keep the original of ``path`` if it is the user's and not yet kept; the copy's path
        when ``how`` is MOVE and the file was renamed away (the caller puts it back if the
        change then fails), else None."""
        with self._lock:
            try:
                st = os.lstat(path)
            except OSError:
                return None
            if stat.S_ISDIR(st.st_mode):
                if how == LINK:
                    self._keep_tree(path)
                return None
            if not self._users(path, st):
                return None
            self._kept.add(path)
            copy = self._copy_path(path)
            try:
                how = _keep_file(path, copy, how)
            except OSError as exc:
                self.record(UNPROTECTED, path, why=f"no copy kept: {exc.strerror or exc}")
                return None
            self.record(KEPT, path, copy=copy, kind="file", how=how, inode=st.st_ino)
            return copy if how == MOVE else None

    def undo_move(self, path: str, copy: str) -> None:
        """Put back an original renamed away for a change that then failed."""
        with self._lock:
            os.rename(copy, path)  # its KEPT line now names a copy that is gone: settling skips it
            self._kept.discard(path)

    def keep_times(self, path: str) -> None:
        """Journal a user's file's times and mode before ``os.utime``, ``os.chmod`` or a new
        hard link changes them (``Path.touch``), and remember the file as the user's: those
        change its ``ctime``, by which a later write would take it for the run's."""
        with self._lock:
            try:
                st = os.stat(path)
            except OSError:
                return
            if path in self._timed or stat.S_ISDIR(st.st_mode) or not self._users(path, st):
                return
            self._timed.add(path)
            self.record(TIMES, path, atime_ns=st.st_atime_ns, mtime_ns=st.st_mtime_ns, mode=stat.S_IMODE(st.st_mode))

    def _users(self, path: str, st: os.stat_result) -> bool:
        if path in self._kept or path in self._created:
            return False
        if stat.S_ISDIR(st.st_mode) or path in self._timed:
            return True
        born = birth_ns(path)  # another process's touch or chmod moves the ctime, never this
        return (born if born is not None else st.st_ctime_ns) < self._started_ns

    def _keep_tree(self, top: str) -> None:
        """Link every user's file under ``top`` and journal its folders (the user's places
        only), before it goes whole."""
        for folder, dirs, files in os.walk(top):
            if folder not in self._created and folder not in self._kept and self.kind(folder) == USERS:
                self._kept.add(folder)
                self.record(KEPT, folder, copy=None, kind="dir")
            for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
                self.before_change(os.path.join(folder, name), LINK)

    def _copy_path(self, path: str) -> str:
        self._seq += 1
        folder = os.path.join(self._dir, COPIES_DIR)
        os.makedirs(folder, exist_ok=True)
        # The name's head only: a name near the filesystem's 255-byte limit must still fit.
        return os.path.join(folder, f"{os.getpid()}-{self._seq}-{os.path.basename(path)[:64]}")

    # -- after a change -----------------------------------------------------------------------
    def created(self, path: str, kind: str = USERS) -> None:
        """``path`` did not exist before this change and does now (journaled in the user's
        places: the run's to move away; in scratch only remembered as the run's)."""
        with self._lock:
            if path not in self._created and path not in self._kept:
                self._created.add(path)
                if kind == USERS:
                    self.record(CREATED, path)

    def wrote(self, path: str) -> None:
        """Count one write of ``path`` (an open for writing, a save, a replace onto it)."""
        times = self._wrote.get(path, 0) + 1
        self._wrote[path] = times
        if times <= _COUNT_EVERY_LINE or times & (times - 1) == 0:
            self._journaled[path] = times
            self.record(WROTE, path, times=times)

    def flush(self) -> None:
        """Journal the counts not yet written, and the files this process still holds open
        for writing that Python's calls did not show (a C library's own writer: a
        database, a shell's redirection), for the parent to name if they changed (at exit)."""
        for path, times in list(self._wrote.items()):
            if self._journaled.get(path) != times:
                self._journaled[path] = times
                self.record(WROTE, path, times=times)
        for path, inode in written_files():
            if inode not in self.inherited and path not in self._kept and path not in self._created \
                    and self.guarded(path):
                self.record(HELD, path, inode=inode)

    # -- the journal ----------------------------------------------------------------------------
    def record(self, op: str, path: str, **extra: Any) -> None:
        """Append one journal line; one ``write`` call, so lines of the tree never interleave."""
        pid = os.getpid()
        line = json.dumps({"pid": pid, "op": op, "path": path, **extra}) + "\n"
        if self._pid != pid:  # first line, or the first in a forked child
            if self._fd is not None and self._pid:
                _close_quietly(self._fd)
            os.makedirs(self._dir, exist_ok=True)
            self._fd = os.open(journal_path(self._dir, pid), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._pid = pid
        os.write(self._fd, line.encode("utf-8", "surrogateescape"))

    def close(self) -> None:
        """Close the journal file (the guard's uninstall)."""
        if self._fd is not None:
            _close_quietly(self._fd)
        self._fd, self._pid = None, 0


def _keep_file(path: str, copy: str, how: str) -> str:
    """Keep ``path`` at ``copy`` the cheapest way ``how`` allows; the way used."""
    if how == MOVE:
        try:
            os.rename(path, copy)
            return MOVE
        except OSError:  # another filesystem: copy, and let the change truncate in place
            shutil.copy2(path, copy)
            return COPY
    if how == LINK:
        try:
            os.link(path, copy, follow_symlinks=False)
            return LINK
        except OSError:
            shutil.copy2(path, copy, follow_symlinks=False)
            return COPY
    shutil.copy2(path, copy)
    return COPY


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
