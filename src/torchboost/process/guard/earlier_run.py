"""What an earlier run left in the writes folder, dealt with before the next run starts.

Each run's guard works in ``<out>/writes/``: its journal and the originals it kept in
``.journal/``, then, once settled, the script's writes kept apart. The next run in the
same report folder starts by clearing it, but never blindly:

* a journal still there was never settled: torchboost itself was killed (SIGKILL, the
  OOM killer) before it could put the user's files back. It is settled now, from what it
  holds (the originals the guard kept, the small files copied before the run), and what
  went back is said (:func:`recover`); a file changed since that run ended (the user ran
  the script again, edited it) is left as it is, its original kept beside the writes and
  named; the writes folder is then kept, not cleared;
* a writes folder a recovery left (:data:`KEEP`) is kept, renamed ``writes.1``,
  ``writes.2``, ...: what it holds may matter to the user, and is never deleted
  (:func:`clear`); any other is the earlier run's own, and is cleared.

The insured copies' rule (:func:`insured_lines`) is here too, shared by a run's settling
and by a recovery.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from torchboost.process.guard.folder_snapshot import Entry, FolderSnapshot, entry_of
from torchboost.process.guard.guard_spec import HELD, KEPT, UNPROTECTED, read_held, read_journal
from torchboost.process.guard.user_files import OUT_OF_SIGHT, UserWrites, settle

__all__ = ["INSURED_LIST", "INSURED_JOURNAL", "KEEP", "clear", "insured_lines", "recover", "save_insured"]

INSURED_LIST = "insured.json"
"""In the journal folder: each insured file's copy and its entry before the run."""
INSURED_JOURNAL = "insured.jsonl"
"""In the journal folder: the insured files' lines, read after every process's own."""
KEEP = ".keep"
"""In a writes folder: keep it (what a run torchboost was killed in left: the script's
versions of files put back, originals not put back over the user's later changes)."""


def save_insured(journal_dir: Path, insured: dict[str, str], entries: dict[str, Entry]) -> None:
    """Record the insured copies with their entries before the run, for a recovery (a full
    disk leaves none: the run goes on, and its own writes say the disk is full)."""
    data = {path: {"copy": copy, "entry": list(_fields(entries[path]))} for path, copy in insured.items()}
    try:
        (journal_dir / INSURED_LIST).write_text(json.dumps(data), encoding="utf-8")
    except OSError:
        with contextlib.suppress(OSError):
            (journal_dir / INSURED_LIST).unlink()


def insured_lines(insured: dict[str, str], entries: dict[str, Entry], held: set[int]) -> list[str]:
    """Journal lines for the insured files that changed behind the guard's back: kept
    originals where a process of the run held them open for writing (``held``: inodes), or
    they were removed; left alone and named otherwise (a writer torchboost could not see,
    an edit made meanwhile)."""
    lines = []
    for path, copy in insured.items():
        try:
            same = entry_of(os.lstat(path)) == entries[path]
        except OSError:
            same = False
        if same:
            continue
        if entries[path].inode in held or not os.path.lexists(path):
            lines.append(json.dumps({"pid": 0, "op": KEPT, "path": path, "copy": copy, "kind": "file"}))
        else:
            lines.append(json.dumps({"pid": 0, "op": UNPROTECTED, "path": path, "why": OUT_OF_SIGHT}))
    return lines


def write_insured_lines(journal_dir: Path, lines: list[str]) -> None:
    """Add the insured files' lines to the journal (made again if the script removed it)."""
    if lines:
        journal_dir.mkdir(parents=True, exist_ok=True)
        (journal_dir / INSURED_JOURNAL).write_text("\n".join(lines) + "\n", encoding="utf-8")


def recover(writes_dir: Path, journal_dir: Path) -> UserWrites | None:
    """Settle an earlier run's journal that was never settled; what it put back (None: there
    was none). The user's folders were not recorded then: the originals the guard kept go
    back, and what the run was seen making is moved into the writes folder."""
    if not journal_dir.is_dir():
        return None
    ended_ns = _last_written_ns(journal_dir)
    insured, entries = _read_insured(journal_dir)
    lines = read_journal(journal_dir)
    held = read_held(journal_dir) | {int(line.get("inode", 0)) for line in lines if line["op"] == HELD}
    changed = _changed_since(lines, ended_ns, writes_dir / _ORIGINALS)  # first: their words win
    rest = {path: copy for path, copy in insured.items() if path not in changed}
    write_insured_lines(journal_dir, list(changed.values()) + insured_lines(rest, entries, held))
    snapshot = FolderSnapshot((), (), 1, entries, note="an earlier run, never settled")
    writes = settle(snapshot, journal_dir, writes_dir)
    shutil.rmtree(journal_dir, ignore_errors=True)
    if writes_dir.is_dir() and any(writes_dir.iterdir()):
        (writes_dir / KEEP).write_text("what a run torchboost was killed in left\n", encoding="utf-8")
    return writes


_ORIGINALS = "originals"
"""Where a recovery keeps the originals it does not put back."""
_SLACK_NS = 2_000_000_000


def _last_written_ns(journal_dir: Path) -> int:
    """When the killed run last journaled anything: about when it ended."""
    times = [p.stat().st_mtime_ns for p in journal_dir.rglob("*") if p.is_file()]
    return max(times, default=0)


def _changed_since(lines: list[dict], ended_ns: int, originals: Path) -> dict[str, str]:
    """The kept originals of files changed after the killed run ended (the user ran the
    script, edited a file): not put back over that change. Each original is moved to
    ``originals`` (its journal line then names no copy, and settling skips it) and the file
    is named, with where its original is: path -> its journal line."""
    named: dict[str, str] = {}
    seen: set[str] = set()
    for line in lines:
        path, copy = line["path"], line.get("copy")
        if line["op"] != KEPT or line.get("kind") != "file" or path in seen or not copy or not os.path.lexists(copy):
            continue
        seen.add(path)
        try:
            if os.lstat(path).st_mtime_ns <= ended_ns + _SLACK_NS:
                continue
        except OSError:
            continue
        dest = originals / path.lstrip(os.sep)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(copy, dest)
        named[path] = json.dumps({"pid": 0, "op": UNPROTECTED, "path": path,
                                  "why": f"changed after the run torchboost was killed in: left as it is, its original "
                                         f"from before that run kept at {dest}"})
    return named


def clear(writes_dir: Path) -> Path | None:
    """Clear an earlier run's writes folder, or, when it is to be kept (:data:`KEEP`), keep it
    under the next free ``writes.N``; where it was kept."""
    if not writes_dir.exists():
        return None
    if not (writes_dir / KEEP).exists():
        shutil.rmtree(writes_dir, ignore_errors=True)
        return None
    n = 1
    while writes_dir.with_name(f"{writes_dir.name}.{n}").exists():
        n += 1
    kept = writes_dir.with_name(f"{writes_dir.name}.{n}")
    os.rename(writes_dir, kept)
    return kept


def _fields(entry: Entry) -> tuple[Any, ...]:
    return entry.is_dir, entry.size, entry.mtime_ns, entry.inode, entry.mode


def _read_insured(journal_dir: Path) -> tuple[dict[str, str], dict[str, Entry]]:
    try:
        data = json.loads((journal_dir / INSURED_LIST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, {}
    insured, entries = {}, {}
    for path, item in data.items():
        if os.path.lexists(item["copy"]):
            insured[path], entries[path] = item["copy"], Entry(*item["entry"])
    return insured, entries
