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
    {"pid", "op": "held", "path", "inode"}                         open for writing at the process's end

Paths are absolute, symbolic links in their folders resolved.

Three kinds of place (:meth:`WriteGuardSpec.kind_of`): the user's, where every original
is kept and every new entry is the run's to move away; scratch (the temp directory and
the caches), where the originals of what existed before the run are kept as anywhere else
but what the run makes there is its own; and exempt (torchboost's own entries of the
report folder, the compile cache a trial fills, the file torchboost's own output goes
to, devices), never journaled.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

__all__ = ["WriteGuardSpec", "OwnEntries", "KEPT", "TIMES", "CREATED", "WROTE", "UNPROTECTED", "HELD", "COPIES_DIR",
           "USERS", "SCRATCH", "EXEMPT", "journal_path", "read_journal", "settled_journals", "scratch_folders",
           "ALWAYS_EXEMPT", "note_held", "read_held", "written_files"]

KEPT = "kept"
TIMES = "times"
CREATED = "created"
WROTE = "wrote"
UNPROTECTED = "unprotected"
HELD = "held"
USERS = "users"
"""A place of the user's: every original kept, every new entry the run's, moved away after."""
SCRATCH = "scratch"
"""The temp directory and the caches: originals kept, what the run makes there left to it."""
EXEMPT = "exempt"
"""torchboost's own: nothing journaled."""
COPIES_DIR = "copies"
"""Folder inside the journal folder holding the kept originals."""
_SUFFIX = ".jsonl"
_SETTLED = ".settled"

ALWAYS_EXEMPT = ("/dev", "/proc", "/sys")
"""Never journaled: device and kernel files (``/dev/null``, ``/proc/self/...``)."""


@dataclass(frozen=True)
class OwnEntries:
    """torchboost's own entries of a report folder: its top-level names that match one of
    ``names`` (``facts*.json``, ``writes``), and everything inside them. The rest of the
    folder is guarded like any other: the script may write there too."""

    folder: str
    """The report folder (absolute, links resolved); "" for none."""
    names: tuple[str, ...] = ()
    """Shell patterns of the top-level names (``fnmatch``, case-sensitive)."""

    def holds(self, path: str) -> bool:
        """Whether ``path`` (absolute, resolved) is one of the entries or inside one."""
        if not self.folder or not path.startswith(self.folder.rstrip(os.sep) + os.sep):
            return False
        first = path[len(self.folder.rstrip(os.sep)) + 1:].split(os.sep, 1)[0]
        return any(fnmatch.fnmatchcase(first, name) for name in self.names)


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
    """Folders and files never journaled (a trial's compile cache, the file torchboost's own
    output goes to); :data:`ALWAYS_EXEMPT` and the journal folder are added by the guard."""
    scratch: tuple[str, ...] = ()
    """Folders where the run's new entries are its own (the temp directory, the caches):
    what existed there before the run is kept and put back like the user's files."""
    own_folder: str = ""
    """The report folder whose :attr:`own_names` are torchboost's (""): none."""
    own_names: tuple[str, ...] = ()
    """Shell patterns of torchboost's own top-level entries in :attr:`own_folder`."""

    def __post_init__(self) -> None:
        if not os.path.isabs(self.journal_dir):
            raise ValueError(f"journal_dir must be an absolute path, got {self.journal_dir!r}")
        if self.started_ns <= 0:
            raise ValueError(f"started_ns must be a time in ns since the epoch, got {self.started_ns}")
        for name in ("roots", "exempt", "scratch", "own_names"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def own(self) -> OwnEntries:
        """torchboost's own entries of the report folder."""
        return OwnEntries(self.own_folder, self.own_names)

    def rules(self) -> list[tuple[str, str]]:
        """(folder with a trailing separator, kind), longest first: the longest folder that
        holds a path decides its kind (a user's folder inside the temp directory is the
        user's; the report folder inside the user's folder is the user's too, but for
        torchboost's own entries in it)."""
        found = ([(p, EXEMPT) for p in (*self.exempt, *ALWAYS_EXEMPT, self.journal_dir)]
                 + [(p, SCRATCH) for p in self.scratch] + [(p, USERS) for p in self.roots])
        return sorted(((os.path.join(os.path.realpath(p), ""), kind) for p, kind in found),
                      key=lambda rule: -len(rule[0]))

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


def note_held(journal_dir: str | Path, pid: int) -> set[int]:
    """Name, for the parent, the regular files process ``pid`` (this one) was started holding
    open for writing, by inode: a wrapper's ``>> train.log`` on its standard output. A
    small file of the user's that grew is put back only when a process of the run held it
    (the parent's :class:`~torchboost.process.guard.run_guard.RunGuard`); one that grew
    otherwise was written by someone else, the user editing it while a tune runs. Returns
    the inodes."""
    inodes = {st.st_ino for _, st in _written_fds()}
    if inodes:
        try:
            (Path(journal_dir) / f"{_HELD}{pid}.json").write_text(json.dumps(sorted(inodes)), encoding="utf-8")
        except OSError:
            pass  # the parent then leaves a grown file as it is, and names it
    return inodes


def _written_fds() -> list[tuple[int, os.stat_result]]:
    """This process's descriptors of regular files open for writing, with their ``fstat``."""
    try:
        import fcntl

        fds = [int(n) for n in os.listdir("/proc/self/fd")] if os.path.isdir("/proc/self/fd") else [0, 1, 2]
    except (ImportError, OSError):
        return []
    found = []
    for fd in fds:
        try:
            st, flags = os.fstat(fd), fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR):
            found.append((fd, st))
    return found


def written_files() -> list[tuple[str, int]]:
    """(path, inode) of the regular files this process holds open for writing, where
    ``/proc`` names them (links resolved; a removed file is left out)."""
    found = []
    for fd, st in _written_fds():
        try:
            path = os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))
            if os.stat(path).st_ino == st.st_ino:
                found.append((path, st.st_ino))
        except OSError:
            continue
    return found


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


def scratch_folders(*, home: str | Path, temp_dir: str | Path, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The folders where what a run makes is its own: the temp directory and the caches
    (``~/.cache`` or ``$XDG_CACHE_HOME``, ``$TORCHINDUCTOR_CACHE_DIR``, ``~/.triton`` or
    ``$TRITON_CACHE_DIR``, ``$HF_HOME``). The caller hands in the environment and home."""
    home = Path(home)
    found = [temp_dir, home / ".cache", home / ".triton"]
    found += [environ[name] for name in ("XDG_CACHE_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "HF_HOME")
              if environ.get(name)]
    return tuple(dict.fromkeys(os.path.realpath(p) for p in found))
