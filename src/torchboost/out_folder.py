"""The report folder (``--out``): torchboost writes only into a folder that is new, empty or its own.

A folder torchboost makes for its reports carries two files of its own: :data:`MARKER`,
which says the folder is torchboost's, and a ``.gitignore`` holding ``*``, so that a
``git add -A`` in the user's repository takes none of what doctor and tune leave there
(reports, trials, the script's writes kept apart, model checkpoints among them).

:func:`claim` is asked before any work: a folder that does not exist is made and marked;
an empty one is marked; a marked one is used again; a folder of torchboost's own default
name from before the marker (``torchboost-doctor``, ...) is marked. Any other folder
holds the user's files, and is refused in one line that names it and what it holds: the
doctor and tune clear their own earlier files in their folder, and the script's output
folder (``--out results`` where the script saves ``results/ckpt.pt``) must never be taken
for one of them. :func:`check` says the same without making anything, for the commands
that check all their input before the folder is made.

A marked folder is torchboost's as it left it: the marker records every top-level entry
(its kind, size and modification time, and a folder's whole content) when a command ends
(:func:`in_use`), and a later command refuses the folder if an entry came or changed since (``--out results`` given
while empty, then the script's own run wrote ``results/report.json`` there). When the
last command in it never ended (killed), what it left cannot be told from the user's:
the folder is taken as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterator

from torchboost.usage import UsageError

__all__ = ["MARKER", "IGNORE_FILE", "DEFAULT_NAMES", "check", "claim", "in_use", "is_own", "made_for_this_command",
           "mark"]

MARKER = ".torchboost"
"""The file that makes a folder torchboost's own."""
IGNORE_FILE = ".gitignore"
"""Beside the marker: ``*``, so that version control ignores the whole folder, itself included."""
DEFAULT_NAMES = frozenset({"torchboost-doctor", "torchboost-tune", "torchboost-demo", "torchboost-compare"})
"""The folders torchboost names by default: one of them from before the marker is its own."""

_MARKER_NOTE = ("This folder was made by torchboost for its reports. torchboost writes into it and clears only "
                "what it wrote; it refuses any other folder that holds files, and this one once anything in it "
                "came or changed after torchboost's last command here ended.")
_IGNORE_TEXT = "# made by torchboost: reports, trials and the script's writes kept apart\n*\n"
_NAMED = 3
"""Entries named in a refusal."""


def is_own(folder: str | Path) -> bool:
    """Whether ``folder`` is torchboost's: marked, or of a default name from before the marker."""
    folder = Path(folder)
    return (folder / MARKER).is_file() or (folder.name in DEFAULT_NAMES and folder.is_dir())


def check(folder: str | Path, flag: str = "--out") -> Path:
    """``folder`` as a report folder torchboost may write, checked without making anything:
    missing (it will be made), empty, or torchboost's own; :class:`UsageError` naming the
    folder and what it holds otherwise."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{flag} {folder}: a file, not a folder; name a folder for the report")
    if not folder.exists():
        return folder
    if is_own(folder):
        _check_unchanged(folder, flag)
        return folder
    held = _entries(folder, flag)
    if held:
        shown = ", ".join(held[:_NAMED]) + (f" and {len(held) - _NAMED} more" if len(held) > _NAMED else "")
        raise UsageError(f"{flag} {folder}: holds files torchboost did not write ({shown}); torchboost clears its "
                         f"own earlier files in its report folder, so it writes only into a new or empty folder, "
                         f"or one it made: name another {flag}")
    return folder


def claim(folder: str | Path, flag: str = "--out", *, usable: Callable[[Path], None] | None = None) -> Path:
    """Check ``folder`` (:func:`check`), make it when missing, let ``usable`` raise if it
    cannot be used (not writable, a full disk), then mark it torchboost's own (the marker
    and the ``.gitignore``); :class:`UsageError` when it cannot be made."""
    folder = check(folder, flag)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {folder}: cannot create it ({exc.strerror or exc})") from None
    if usable is not None:
        usable(folder)
    mark(folder)
    return folder


def mark(folder: Path) -> None:
    """Write the marker and the ``.gitignore`` into ``folder`` when absent; one that cannot
    be written whole is not left half-written (the caller's own checks say why)."""
    for name, text in ((MARKER, _marker_text(None)), (IGNORE_FILE, _IGNORE_TEXT)):
        path = folder / name
        if path.exists():
            continue
        try:
            path.write_text(text, encoding="utf-8")
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink()


@contextlib.contextmanager
def in_use(folder: str | Path) -> Iterator[None]:
    """A command's work in its report folder (claimed already): while it runs the marker says
    no command ended here; as the block ends, however it ends, it records the folder's
    top-level entries, which are torchboost's (see the module docstring)."""
    folder = Path(folder)
    _write_marker(folder, None)
    try:
        yield
    finally:
        _write_marker(folder, _top_level(folder))


def _marker_text(entries: dict[str, list[Any]] | None) -> str:
    return json.dumps({"note": _MARKER_NOTE, "entries": entries}, indent=1) + "\n"


def _write_marker(folder: Path, entries: dict[str, list[Any]] | None) -> None:
    with contextlib.suppress(OSError):
        (folder / MARKER).write_text(_marker_text(entries), encoding="utf-8")


def _top_level(folder: Path) -> dict[str, list[Any]]:
    """Each top-level entry but the marker files: [is a folder, size, modification time in
    ns, and for a folder a digest of every entry inside it, at any depth: a file made deep in
    ``writes/`` changes no top-level time]."""
    found: dict[str, list[Any]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            if entry.name in (MARKER, IGNORE_FILE):
                continue
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                is_dir = entry.is_dir(follow_symlinks=False)
                found[entry.name] = [int(is_dir), 0 if is_dir else st.st_size, st.st_mtime_ns,
                                     _digest(entry.path) if is_dir else ""]
    return found


def _digest(folder: str) -> str:
    """Every entry under ``folder``: its path, kind, size and modification time, hashed."""
    listing = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                st = os.lstat(path)
                listing.update(f"{os.path.relpath(path, folder)}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\n"
                               .encode("utf-8", "surrogateescape"))
    return listing.hexdigest()


def _check_unchanged(folder: Path, flag: str) -> None:
    """Refuse a marked folder whose top-level entries came or changed after the last command
    in it ended (nothing recorded: taken as it is)."""
    try:
        recorded = json.loads((folder / MARKER).read_text(encoding="utf-8")).get("entries")
    except (OSError, ValueError, AttributeError):
        return
    if not isinstance(recorded, dict):
        return
    now = _top_level(folder)
    foreign = sorted(name for name, entry in now.items() if recorded.get(name) != entry)
    if foreign:
        shown = ", ".join(foreign[:_NAMED]) + (f" and {len(foreign) - _NAMED} more" if len(foreign) > _NAMED else "")
        raise UsageError(f"{flag} {folder}: torchboost made it, but {shown} came or changed there after its last "
                         f"run ended (not torchboost's: your script's own output?); torchboost clears its own "
                         f"earlier files in its report folder, so name another {flag}")


@contextlib.contextmanager
def made_for_this_command(folder: str | Path) -> Iterator[None]:
    """Remove ``folder`` again when the block raises and the folder was made inside it and
    holds nothing but torchboost's marker files: a command refused for bad input leaves no
    empty report folder behind."""
    folder = Path(folder)
    existed = folder.exists()
    try:
        yield
    except BaseException:
        if not existed:
            _remove_if_bare(folder)
        raise


def _remove_if_bare(folder: Path) -> None:
    with contextlib.suppress(OSError):
        if set(os.listdir(folder)) <= {MARKER, IGNORE_FILE}:
            for name in (MARKER, IGNORE_FILE):
                (folder / name).unlink(missing_ok=True)
            folder.rmdir()


def _entries(folder: Path, flag: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError as exc:
        raise UsageError(f"{flag} {folder}: cannot be read ({exc.strerror or exc})") from None
