"""The contract of the write guard: what the observed processes are told, and the journal they leave.

The doctor's runs and tune's trials must leave the user's folders as they were. Each
observed process installs :class:`~torchboost.process.guard.write_guard.WriteGuard` with a
:class:`WriteGuardSpec`; before a file that existed when the run started is first changed,
the guard keeps its original in the journal folder and writes one JSON line per event
into a file of its own (``<pid>.jsonl``, appended, one ``write`` call a line, so every
process of the tree shares the folder without a lock). After the whole tree has ended,
the parent reads the lines back (:func:`read_journal`) and settles the folders
(:mod:`torchboost.process.guard.user_files`). Both sides import this module; it imports
nothing else of torchboost.

A journal line is one of::

    {"pid", "op": "kept", "path", "copy", "kind": "file"|"dir"}    the original, kept before a change
    {"pid", "op": "times", "path", "atime_ns", "mtime_ns"}        times before an os.utime
    {"pid", "op": "created", "path"}                               a new file or folder made through Python
    {"pid", "op": "wrote", "path", "times"}                        writes so far to the path by this pid
    {"pid", "op": "unprotected", "path", "why"}                    a change made with no original kept

Paths are absolute, symbolic links in their folders resolved.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

__all__ = ["WriteGuardSpec", "KEPT", "TIMES", "CREATED", "WROTE", "UNPROTECTED", "COPIES_DIR",
           "journal_path", "read_journal", "settled_journals", "default_exempt", "ALWAYS_EXEMPT", "note_held",
           "read_held"]

KEPT = "kept"
TIMES = "times"
CREATED = "created"
WROTE = "wrote"
UNPROTECTED = "unprotected"
COPIES_DIR = "copies"
"""Folder inside the journal folder holding the kept originals."""
_SUFFIX = ".jsonl"
_SETTLED = ".settled"

ALWAYS_EXEMPT = ("/dev", "/proc", "/sys")
"""Never journaled: device and kernel files (``/dev/null``, ``/proc/self/...``)."""


@dataclass(frozen=True)
class WriteGuardSpec:
    """What an observed process's write guard needs: where to journal, what to leave alone."""

    journal_dir: str
    """Folder for the journal lines and the kept originals (absolute; inside the --out folder,
    on the user's filesystem, so that keeping an original is a rename, not a copy)."""
    started_ns: int
    """When the run started, ns since the epoch (:attr:`FolderSnapshot.taken_ns`): a path whose
    inode changed (``st_ctime_ns``) at or after it was made by the run, not the user."""
    roots: tuple[str, ...] = ()
    """The user's folders (the working directory, the script's folder): always guarded, even
    inside an exempt folder (a project kept under the temp directory)."""
    exempt: tuple[str, ...] = ()
    """Folders whose writes are the run's own business (the --out folder, the temp directory,
    caches); :data:`ALWAYS_EXEMPT` and the journal folder are added by the guard."""

    def __post_init__(self) -> None:
        if not os.path.isabs(self.journal_dir):
            raise ValueError(f"journal_dir must be an absolute path, got {self.journal_dir!r}")
        if self.started_ns <= 0:
            raise ValueError(f"started_ns must be a time in ns since the epoch, got {self.started_ns}")
        object.__setattr__(self, "roots", tuple(self.roots))
        object.__setattr__(self, "exempt", tuple(self.exempt))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "WriteGuardSpec":
        """The spec :meth:`to_dict` wrote (unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names})


def journal_path(journal_dir: str | Path, pid: int) -> Path:
    """The journal file of process ``pid``."""
    return Path(journal_dir) / f"{pid}{_SUFFIX}"


_HELD = "held-"


def note_held(journal_dir: str | Path, pid: int) -> None:
    """Name, for the parent, the regular files process ``pid`` (this one) was started holding
    open for writing, by inode: a wrapper's ``>> train.log`` on its standard output. A
    small file of the user's that grew is put back only when a process of the run held it
    (the parent's :class:`~torchboost.process.guard.run_guard.RunGuard`); one that grew
    otherwise was written by someone else, the user editing it while a tune runs."""
    try:
        import fcntl

        fds = [int(n) for n in os.listdir("/proc/self/fd")] if os.path.isdir("/proc/self/fd") else [0, 1, 2]
    except (ImportError, OSError):
        return
    inodes = set()
    for fd in fds:
        try:
            st, flags = os.fstat(fd), fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR):
            inodes.add(st.st_ino)
    if inodes:
        try:
            (Path(journal_dir) / f"{_HELD}{pid}.json").write_text(json.dumps(sorted(inodes)), encoding="utf-8")
        except OSError:
            pass  # the parent then leaves a grown file as it is, and names it


def read_held(journal_dir: str | Path) -> set[int]:
    """The inodes every process of the run named with :func:`note_held`."""
    held: set[int] = set()
    for path in Path(journal_dir).glob(f"{_HELD}*.json"):
        try:
            held.update(int(i) for i in json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            continue
    return held


def read_journal(journal_dir: str | Path) -> list[dict[str, Any]]:
    """Every line of every process's journal, in each process's order; a torn last line
    (a process killed mid-write) is skipped."""
    folder = Path(journal_dir)
    if not folder.is_dir():
        return []
    return [line for path in sorted(folder.glob(f"*{_SUFFIX}")) for line in _lines(path)]


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if isinstance(line, dict) and "op" in line and "path" in line:
            yield line


def settled_journals(journal_dir: str | Path) -> None:
    """Mark the journal files read, so that settling again does not apply them twice."""
    for path in Path(journal_dir).glob(f"*{_SUFFIX}"):
        os.replace(path, path.with_name(path.name + _SETTLED))


def default_exempt(out_dir: str | Path, *, home: str | Path, temp_dir: str | Path,
                   environ: Mapping[str, str]) -> tuple[str, ...]:
    """The folders a run may write freely: the --out folder, the temp directory and the caches
    (``~/.cache`` or ``$XDG_CACHE_HOME``, ``$TORCHINDUCTOR_CACHE_DIR``, ``~/.triton`` or
    ``$TRITON_CACHE_DIR``, ``$HF_HOME``). The caller hands in the environment and home."""
    home = Path(home)
    found = [out_dir, temp_dir, home / ".cache", home / ".triton"]
    found += [environ[name] for name in ("XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "HF_HOME")
              if environ.get(name)]
    return tuple(dict.fromkeys(os.path.realpath(p) for p in found))
