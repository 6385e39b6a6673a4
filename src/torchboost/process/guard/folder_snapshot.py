"""The user's folders as they were before a run: every entry recorded, for settling after it.

Before the doctor's run or a tune trial starts, :meth:`FolderSnapshot.take` records every
entry of the user's folders (the working directory, the script's folder); its
``taken_ns`` is the run's start for the write guard
(:class:`~torchboost.process.guard.guard_spec.WriteGuardSpec`). A folder too large to record is
said before the run starts (:attr:`FolderSnapshot.note`): the guard still keeps the
originals of what Python changes there, but new entries and changes made outside Python
cannot be found.

After the run, :func:`~torchboost.process.guard.user_files.settle` compares the folders
with it.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from torchboost.process.guard.guard_spec import OwnEntries

__all__ = ["Entry", "FolderSnapshot", "SKIPPED_NAMES", "walk", "entry_of", "printable", "under"]

SKIPPED_NAMES = frozenset({".git"})
"""Folder names not recorded (version control's own store: large, and not the script's)."""


@dataclass(frozen=True)
class Entry:
    """One recorded entry of the user's folders."""

    is_dir: bool
    size: int
    """Bytes (a folder's as the filesystem reports it)."""
    mtime_ns: int
    """Last modification, ns since the epoch."""
    inode: int
    mode: int
    """``st_mode``: the type and the permission bits."""


@dataclass(frozen=True)
class FolderSnapshot:
    """The user's folders as they were before a run: every entry, by absolute path."""

    roots: tuple[str, ...]
    """The folders recorded (absolute, links resolved, none inside another)."""
    exempt: tuple[str, ...]
    """Folders and files left out (a trial's compile cache, the file torchboost's output goes to)."""
    taken_ns: int
    """When the recording began, ns since the epoch: the run's start for the write guard."""
    entries: dict[str, Entry] = field(default_factory=dict)
    note: str | None = None
    """Why the recording is incomplete, to be said before the run starts; None when complete."""
    own: OwnEntries = OwnEntries("")
    """torchboost's own entries of the report folder, left out (the rest of it is recorded)."""

    @property
    def complete(self) -> bool:
        """Every entry under the roots was recorded."""
        return self.note is None

    @classmethod
    def take(cls, roots: Sequence[str | Path], *, exempt: Sequence[str | Path] = (), max_entries: int = 200_000,
             clock: Callable[[], int] = time.time_ns, own: OwnEntries = OwnEntries("")) -> "FolderSnapshot":
        """Record every entry under ``roots`` (``.git``, the ``exempt`` folders and torchboost's
        ``own`` entries left out). Past ``max_entries`` entries the recording stops and
        :attr:`note` says so."""
        taken_ns = clock()
        real_roots = _outermost(os.path.realpath(r) for r in roots)
        # An exempt folder that holds a root (a project inside the temp directory) exempts
        # nothing of it: the root is the user's, and its new entries are the run's.
        real_exempt = tuple(dict.fromkeys(e for e in (os.path.realpath(p) for p in exempt)
                                          if not any(under(r, e) for r in real_roots)))
        entries: dict[str, Entry] = {}
        skip = set(real_exempt)
        for root in real_roots:
            for path, st in walk(root, lambda p: p in skip or own.holds(p)):
                if len(entries) >= max_entries:
                    note = (f"{root} holds more than {max_entries:,} entries, too many to record: the originals of "
                            "files the script changes from Python are kept, but new entries and changes made "
                            "outside Python there will not be found")
                    return cls(real_roots, real_exempt, taken_ns, {}, note, own)
                entries[path] = entry_of(st)
        return cls(real_roots, real_exempt, taken_ns, entries, None, own)

    def covers(self, path: str) -> bool:
        """Whether ``path`` lies where the snapshot looked (under a root, outside the skipped)."""
        root = self.root_of(path)
        if root is None or any(under(path, e) for e in self.exempt) or self.own.holds(path):
            return False
        return not SKIPPED_NAMES.intersection(Path(os.path.relpath(path, root)).parts)

    def root_of(self, path: str) -> str | None:
        """The root ``path`` lies under (itself included), or None."""
        return next((r for r in self.roots if under(path, r)), None)

    def relative(self, path: str) -> str:
        """``path`` relative to its root, else absolute, as the filesystem names it."""
        root = self.root_of(path)
        return os.path.relpath(path, root) if root else path

    def shown(self, path: str) -> str:
        """``path`` as the report shows it: :meth:`relative`, printable (:func:`printable`)."""
        return printable(self.relative(path))


def printable(path: str) -> str:
    """A path as text any report can hold: a name's bytes that are not UTF-8 (Python keeps
    them as lone surrogates) shown as ``\\xe9``."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return dataclasses.asdict(self)


def walk(root: str, skip: Callable[[str], bool]) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (itself first) with its ``lstat``; links are not followed,
    the entries ``skip`` says and :data:`SKIPPED_NAMES` are left out."""
    try:
        yield root, os.lstat(root)
    except OSError:
        return
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as found:
                children = [(e.path, e.name) for e in found]
        except OSError:  # unreadable or gone: nothing of it to record
            continue
        for path, name in sorted(children):
            if name in SKIPPED_NAMES or skip(path):
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            yield path, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)


def entry_of(st: os.stat_result) -> Entry:
    """The :class:`Entry` of an ``lstat`` result."""
    return Entry(stat.S_ISDIR(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ino, st.st_mode)


def under(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (both absolute)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _outermost(paths: Iterator[str]) -> tuple[str, ...]:
    found: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(under(path, f) for f in found):
            found.append(path)
    return tuple(found)
