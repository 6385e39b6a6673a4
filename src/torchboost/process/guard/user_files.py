"""The user's folders left as they were after a run: originals put back, the run's writes kept apart.

After the whole process tree of a doctor's run or a tune trial has ended, :func:`settle`
reads the write guard's journal (:mod:`torchboost.process.guard.guard_spec`) and, against the
snapshot taken before the run (:class:`~.folder_snapshot.FolderSnapshot`):

1. puts every user's original back in place, the script's version of it moved into the
   writes folder (folders the run removed are made again first);
2. moves every entry the run made into the writes folder (a new folder whole; one holding
   nothing but empty folders is removed): what the snapshot did not have, and what the
   guard saw created outside the user's folders;
3. names every user's entry changed with no original kept (a writer outside Python, a
   shell redirection) as not restored, and gives the user's folders back their times.

Settling is done once per run: per tune trial, into a writes folder of its own, after a
snapshot of its own. The journal is marked read, so settling it again changes nothing.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchboost.process.guard.guard_spec import COPIES_DIR, CREATED, KEPT, TIMES, UNPROTECTED, WROTE, read_journal, \
    settled_journals
from torchboost.process.guard.folder_snapshot import SKIPPED_NAMES, FolderSnapshot, entry_of, under
from torchboost.process.guard.user_writes import (AS_THEY_WERE, OUT_OF_SIGHT, REMOVED_OUT_OF_SIGHT, NotRestored,
                                                  UserWrites, WrittenPath)

__all__ = ["AS_THEY_WERE", "FolderSnapshot", "WrittenPath", "NotRestored", "UserWrites", "settle", "OUT_OF_SIGHT",
           "REMOVED_OUT_OF_SIGHT"]

# -- settling ---------------------------------------------------------------------------------

def settle(snapshot: FolderSnapshot, journal_dir: str | Path, writes_dir: str | Path,
           held: set[int] = frozenset()) -> UserWrites:  # type: ignore[assignment]
    """Put the user's folders back as ``snapshot`` found them, the run's writes moved into
    ``writes_dir``; call once the whole process tree has ended. ``held``: inodes of the
    files the run's processes held open for writing (a new file among them is the run's,
    made past Python: a wrapper's ``> run.out``)."""
    journal = _Journal.read(str(journal_dir))
    writes = os.path.realpath(writes_dir)
    mover = _Mover(snapshot, writes, journal, held)
    restored = _restore_originals(snapshot, journal, mover)
    skip = {writes, os.path.realpath(journal_dir)}
    if snapshot.complete:
        for root in snapshot.roots:
            for path in _new_under(root, snapshot, skip):
                mover.move_new(path)
    for path in sorted(journal.created):  # outside the roots, or all of them when the snapshot is incomplete
        if not (snapshot.complete and snapshot.covers(path)) and os.path.lexists(path) and not mover.taken(path):
            if not any(under(path, s) for s in skip):
                mover.move_new(path)
    not_restored = _changed_behind(snapshot, set(restored), journal) + mover.failed
    _restore_folder_times(snapshot)
    settled_journals(journal_dir)
    shutil.rmtree(os.path.join(journal_dir, COPIES_DIR), ignore_errors=True)  # the run's own versions
    root = snapshot.roots[0] if snapshot.roots else None
    shown_writes = os.path.relpath(writes, root) if root and under(writes, root) else writes
    return UserWrites(shown_writes, mover.kept_apart, [snapshot.shown(p) for p in restored], not_restored,
                      snapshot.note)


@dataclass
class _Journal:
    """The journal's lines, gathered per path."""

    kept: dict[str, dict[str, Any]] = field(default_factory=dict)
    times: dict[str, tuple[int, int, int | None]] = field(default_factory=dict)
    """Each user's file's times and mode (None: not journaled) before they changed."""
    created: set[str] = field(default_factory=set)
    wrote: dict[str, int] = field(default_factory=dict)
    unprotected: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, journal_dir: str) -> "_Journal":
        out = cls()
        most: dict[tuple[int, str], int] = {}  # each process journals its running count
        for line in read_journal(journal_dir):
            op, path = line["op"], line["path"]
            if op == KEPT and path not in out.kept:
                # A copy gone was put back by the guard when the change failed.
                if line.get("kind") == "dir" or os.path.lexists(line.get("copy") or ""):
                    out.kept[path] = line
            elif op == TIMES:
                out.times.setdefault(path, (line["atime_ns"], line["mtime_ns"], line.get("mode")))
            elif op == CREATED:
                out.created.add(path)
            elif op == WROTE:
                key = (line.get("pid", 0), path)
                most[key] = max(most.get(key, 0), int(line.get("times", 1)))
            elif op == UNPROTECTED:
                out.unprotected.setdefault(path, line.get("why", "no original kept"))
        for (_, path), times in most.items():
            out.wrote[path] = out.wrote.get(path, 0) + times
        return out

    def writes_under(self, path: str) -> int:
        """Writes counted to ``path`` and everything inside it."""
        return sum(n for p, n in self.wrote.items() if under(p, path))


class _Mover:
    """Moves the run's entries into the writes folder, mirroring where they were."""

    def __init__(self, snapshot: FolderSnapshot, writes: str, journal: _Journal, held: set[int]) -> None:
        self.snapshot, self.writes, self.journal, self.held = snapshot, writes, journal, held
        self.kept_apart: list[WrittenPath] = []
        self.failed: list[NotRestored] = []
        self._moved: list[str] = []

    def taken(self, path: str) -> bool:
        """Whether ``path`` or a folder above it was already moved."""
        return any(under(path, m) for m in self._moved)

    def destination(self, path: str) -> str:
        """A free place in the writes folder for ``path``."""
        where = self.snapshot.relative(path)
        dest = os.path.join(self.writes, where if not os.path.isabs(where) else "outside" + where)
        base, n = dest, 0
        while os.path.lexists(dest):  # settled into the same folder before
            n += 1
            dest = f"{base}.{n}"
        return dest

    def move(self, path: str) -> str:
        """Move ``path`` into the writes folder; where it went."""
        dest = self.destination(path)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.move(path, dest)
        self._moved.append(path)
        return dest

    def move_script_version(self, path: str) -> None:
        """The script's version of a user's file, before the original goes back."""
        dest = self.move(path)
        self.kept_apart.append(WrittenPath(self.snapshot.shown(path), self.journal.writes_under(path), dest, False))

    def move_new(self, path: str) -> None:
        """A new entry: the run's (a process of it was seen making it, or held it open for
        writing) moved whole, or removed when it holds only empty folders; any other left
        where it is and named: another program made it meanwhile, or the user, and moving
        it would change what is theirs."""
        entries, files = _count(path)
        shown, times = self.snapshot.shown(path), self.journal.writes_under(path)
        if not self._runs(path):
            self.kept_apart.append(WrittenPath(shown, times, None, True, entries, False))
            self._moved.append(path)
            return
        if files == 0 and entries > 0 and _remove_empty(path):
            self.kept_apart.append(WrittenPath(shown, times, None, True, entries))
            self._moved.append(path)
            return
        self.kept_apart.append(WrittenPath(shown, times, self.move(path), True, entries))

    def _runs(self, path: str) -> bool:
        """A process of the run made ``path`` (or something in it), or held it open for writing."""
        if any(under(path, made) or under(made, path) for made in self.journal.created):
            return True
        try:
            return os.lstat(path).st_ino in self.held
        except OSError:
            return False


def _restore_originals(snapshot: FolderSnapshot, journal: _Journal, mover: _Mover) -> list[str]:
    """Put back every original the guard kept (folders before their files); the paths."""
    restored: list[str] = []
    for path, line in sorted(journal.kept.items(), key=lambda item: (item[0].count(os.sep), item[0])):
        is_dir = line.get("kind") == "dir"
        if not _is_original(path, is_dir, snapshot, journal):
            continue
        try:
            done = _restore_dir(path, snapshot, mover) if is_dir else _restore_file(path, line, mover)
        except OSError as exc:
            kept = "" if is_dir else f"; the original is at {mover.move(line['copy'])}"
            mover.failed.append(NotRestored(snapshot.shown(path), f"could not be put back: {exc.strerror}{kept}"))
            continue
        if done:
            restored.append(path)
    for path, (atime_ns, mtime_ns, mode) in journal.times.items():
        if _is_original(path, False, snapshot, journal) and os.path.isfile(path) \
                and (path in restored or _only_touched(path, snapshot, journal)):
            os.utime(path, ns=(atime_ns, mtime_ns))
            if mode is not None:
                os.chmod(path, mode)
            if path not in restored:
                restored.append(path)
    return restored


def _only_touched(path: str, snapshot: FolderSnapshot, journal: _Journal) -> bool:
    """Whether a file whose times or mode the run changed holds what it held: no write of
    it seen, and, where the snapshot looked, its size and inode as recorded. Else its times
    stay as the change left them, so that the change is seen (and named), not hidden."""
    if journal.writes_under(path):
        return False
    entry = snapshot.entries.get(path) if snapshot.complete and snapshot.covers(path) else None
    if entry is None:
        return True
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return now.st_size == entry.size and now.st_ino == entry.inode


def _is_original(path: str, is_dir: bool, snapshot: FolderSnapshot, journal: _Journal) -> bool:
    """Whether the guard's kept entry is the user's: the snapshot says, where it looked."""
    if snapshot.complete and snapshot.covers(path):
        entry = snapshot.entries.get(path)
        return entry is not None and entry.is_dir == is_dir
    return not is_dir or path not in journal.created


def _restore_file(path: str, line: dict[str, Any], mover: _Mover) -> bool:
    copy = line["copy"]
    if _unchanged(path, copy):  # kept before a change that never came (a database only read)
        os.unlink(copy)
        return False
    if _changed_in_place(path, line):  # under a name that has others: they must see the original too
        _restore_in_place(path, copy, mover)
        return True
    if os.path.lexists(path):
        mover.move_script_version(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.replace(copy, path)  # the original's own inode and times, when on one filesystem
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        shutil.copy2(copy, path, follow_symlinks=False)
        os.unlink(copy)
    return True


def _changed_in_place(path: str, line: dict[str, Any]) -> bool:
    """Whether ``path`` still holds the original's own inode, which the run changed in place
    (kept by a copy: an append, ``r+``), and other hard links share it (a data set linked
    into the project from a store): replacing its inode would leave them the script's
    version. An inode that came back under this name by the restore of another (the script
    renamed one user's file onto another) is not this one."""
    if line.get("how", "copy") != "copy":
        return False
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and st.st_ino == line.get("inode", st.st_ino)


def _restore_in_place(path: str, copy: str, mover: _Mover) -> None:
    """Put the original's bytes and times back into ``path``'s own inode, the script's
    version copied into the writes folder first."""
    dest = mover.destination(path)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.copy2(path, dest)
    mover.kept_apart.append(WrittenPath(mover.snapshot.shown(path), mover.journal.writes_under(path), dest, False))
    with open(copy, "rb") as src, open(path, "r+b") as dst:
        shutil.copyfileobj(src, dst)
        dst.truncate()
    kept = os.stat(copy)
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    os.unlink(copy)


def _unchanged(path: str, copy: str) -> bool:
    """Whether ``path`` is still the file ``copy`` kept: same size, same modification time,
    same bytes (read only when the first two agree)."""
    try:
        now, kept = os.lstat(path), os.lstat(copy)
    except OSError:
        return False
    if not (stat.S_ISREG(now.st_mode) and now.st_size == kept.st_size and now.st_mtime_ns == kept.st_mtime_ns):
        return False
    with open(path, "rb") as a, open(copy, "rb") as b:
        while True:
            block = a.read(1 << 20)
            if block != b.read(1 << 20):
                return False
            if not block:
                return True


def _restore_dir(path: str, snapshot: FolderSnapshot, mover: _Mover) -> bool:
    if os.path.isdir(path) and not os.path.islink(path):
        return False
    if os.path.lexists(path):  # the script put something else where the user's folder was
        mover.move_script_version(path)
    os.makedirs(path)
    entry = snapshot.entries.get(path)
    if entry is not None:
        os.chmod(path, stat.S_IMODE(entry.mode))
    return True


def _new_under(root: str, snapshot: FolderSnapshot, skip: set[str]) -> list[str]:
    """Entries under ``root`` the snapshot did not have, outermost only."""
    found, stack = [], [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                children = sorted((e.path, e.name, e.is_dir(follow_symlinks=False)) for e in entries)
        except OSError:
            continue
        for path, name, is_dir in children:
            if name in SKIPPED_NAMES or path in skip or not snapshot.covers(path):
                continue
            if path not in snapshot.entries:
                found.append(path)
            elif is_dir and snapshot.entries[path].is_dir:
                stack.append(path)
    return found


def _changed_behind(snapshot: FolderSnapshot, restored: set[str], journal: _Journal) -> list[NotRestored]:
    """The user's entries changed with no original kept: the guard's reasons, then the snapshot's."""
    out = {p: why for p, why in journal.unprotected.items()
           if p not in restored and (p in snapshot.entries or not snapshot.covers(p))}
    if snapshot.complete:
        for path, entry in snapshot.entries.items():
            if path in restored or path in out:
                continue
            try:
                now = entry_of(os.lstat(path))
            except FileNotFoundError:
                out[path] = REMOVED_OUT_OF_SIGHT
                continue
            if entry.is_dir != now.is_dir or (not entry.is_dir and now != entry):
                out[path] = OUT_OF_SIGHT
    return [NotRestored(snapshot.shown(p), why) for p, why in sorted(out.items())]


def _restore_folder_times(snapshot: FolderSnapshot) -> None:
    """Give the user's folders back their modification times (entries came and went)."""
    for path, entry in snapshot.entries.items():
        if entry.is_dir:
            try:
                st = os.lstat(path)
                if stat.S_ISDIR(st.st_mode) and st.st_mtime_ns != entry.mtime_ns:
                    os.utime(path, ns=(st.st_atime_ns, entry.mtime_ns), follow_symlinks=False)
            except OSError:
                continue


def _count(path: str) -> tuple[int, int]:
    """(entries, files) in ``path``, itself included; links are not followed."""
    if not os.path.isdir(path) or os.path.islink(path):
        return 1, 1
    entries, files = 1, 0
    for _, dirs, names in os.walk(path):
        entries += len(dirs) + len(names)
        files += len(names)
    return entries, files


def _remove_empty(path: str) -> bool:
    """Remove a folder holding only empty folders, bottom up; False if something else was there."""
    try:
        for folder, _, _ in sorted(os.walk(path), key=lambda walked: -len(walked[0])):
            os.rmdir(folder)
    except OSError:
        return False
    return True
