"""One observed run's write guard, from the parent's side: the user's folders recorded
before the command starts, the guard's spec handed to its processes, the folders settled
after the whole tree has ended.

The user's folders are the working directory and the script's folder. Every file that
existed before the run is put back wherever it is, the temp directory and the caches
included (:mod:`.user_files`); what the script makes is kept apart in ``<out>/writes/``
after the run, but for what it makes in the temp directory and the caches
(:func:`~torchboost.process.guard.guard_spec.scratch_folders`), which is its own. The
report folder is guarded like any other but for torchboost's own entries in it (the
``own`` names: facts, traces, the writes folder).

The guard in the processes sees Python's writes. A writer outside Python (a wrapper's
``>> train.log``, a C library's own ``fopen``) is not seen, so the small files of the
user's folders are also copied before the run (:data:`INSURED_FILE_BYTES` each, at most
:data:`INSURED_BYTES` in all, the shallowest first: logs and CSVs beside the script rather
than a data set's samples). One of them that changed behind the guard's back while a
process of the run held it open for writing (a wrapper's ``>> train.log`` on the script's
standard output: :func:`~torchboost.process.guard.guard_spec.note_held`; a database a C
library wrote, seen open by :mod:`.held_files`), or that was removed, is put back from that
copy like any other original. One that changed while no process of the run held it is
left as it is and named: no process of the run wrote it, as far as torchboost could see,
and putting the copy back could undo an edit made meanwhile (a line appended to train.py
while a long tune runs). What the run's processes held open for writing and changed past
the guard, wherever it is, is named too (:mod:`.held_files`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Iterable

from torchboost import _json as strict_json
from torchboost.out_folder import MARKER
from torchboost.process.guard.guard_keeper import Keeper
from torchboost.process.guard.guard_spec import (CREATED, KEPT, OwnEntries, WriteGuardSpec, read_held,
                                                 read_journal, scratch_folders)
from torchboost.process.guard.folder_snapshot import FolderSnapshot, under
from torchboost.process.guard.earlier_run import clear, insured_lines, recover, save_insured, write_insured_lines
from torchboost.process.guard.held_files import HeldFile, HeldFiles, journal_held, out_of_sight
from torchboost.process.guard.user_files import AS_THEY_WERE, OUT_OF_SIGHT, NotRestored, UserWrites, settle

__all__ = ["INSURED_BYTES", "INSURED_FILE_BYTES", "WRITES_DIR", "RunGuard", "own_output_files", "summed_writes"]

INSURED_FILE_BYTES = 1 << 20
"""A file of the user's folders up to this size is copied before the run (1 MiB)."""
INSURED_BYTES = 64 << 20
"""At most this much is copied before each run in all (64 MiB)."""
WRITES_DIR = "writes"
"""Folder inside ``--out`` where a run's writes in the user's folders are kept apart."""
_JOURNAL_DIR = ".journal"
_INSURED_DIR = "insured"


class RunGuard:
    """Records the user's folders now (:meth:`spec` for the processes); :meth:`settle` after."""

    def __init__(self, out: Path, script: Path | None, *, also_exempt: Iterable[str] = (),
                 ledger: Path | None = None, own: Iterable[str] = ()) -> None:
        self.ledger = ledger
        """A JSON-lines file each :meth:`settle` appends its :class:`UserWrites` to (tune's
        many runs, summed in its report); None: none kept."""
        self.writes_dir = Path(out) / WRITES_DIR
        self.journal_dir = self.writes_dir / _JOURNAL_DIR
        self.recovered = recover(self.writes_dir, self.journal_dir)
        """What an earlier run here, never settled (torchboost was killed), put back now."""
        self.kept_earlier = clear(self.writes_dir)
        """Where an earlier run's writes were kept, for entries none of its processes was
        seen making (None: cleared, or none)."""
        self.journal_dir.mkdir(parents=True)
        roots = [os.getcwd()] + ([str(Path(script).resolve().parent)] if script is not None else [])
        self.scratch = scratch_folders(home=Path.home(), temp_dir=tempfile.gettempdir(), environ=os.environ)
        self.exempt = tuple(dict.fromkeys([*own_output_files(), *(os.path.realpath(p) for p in also_exempt)]))
        self.own = OwnEntries(os.path.realpath(out), (WRITES_DIR, *own))
        """torchboost's own entries of the report folder: the writes folder, and the names
        the caller's run writes there (``own``: its facts and traces)."""
        self.snapshot = FolderSnapshot.take(roots, exempt=self.exempt, own=self.own)
        self.insured = self._insure()
        self._held: HeldFiles | None = None

    @property
    def note(self) -> str | None:
        """What cannot be protected, said before the run starts (a folder too large to record),
        and what an earlier run left that was dealt with now."""
        said = [self.snapshot.note] if self.snapshot.note else []
        if self.recovered is not None and (self.recovered.restored or self.recovered.not_restored):
            said.append(f"an earlier run in {self.writes_dir.parent} ended before it put your files back "
                        f"(torchboost was killed): {self.recovered.words()}")
        if self.kept_earlier is not None:
            said.append(f"an earlier run's writes that no process of it was seen making are kept in {self.kept_earlier}")
        return "; ".join(said) or None

    def spec(self) -> dict[str, Any]:
        """The guard's spec for the processes of the run (:class:`WriteGuardSpec` as a dict)."""
        return self._spec().to_dict()

    def _spec(self) -> WriteGuardSpec:
        return WriteGuardSpec(str(self.journal_dir.resolve()), self.snapshot.taken_ns, self.snapshot.roots,
                              self.exempt, self.scratch, self.own.folder, self.own.names)

    def watch(self) -> "RunGuard":
        """Look, while the run goes on, at the files its processes hold open for writing
        (:class:`.held_files.HeldFiles`); :meth:`settle` stops it."""
        self._held = HeldFiles().start()
        return self

    def _insure(self) -> dict[str, str]:
        """Copy the small files of the user's folders (see the module docstring); path -> copy."""
        folder = self.journal_dir / _INSURED_DIR
        # torchboost's own folders (their reports, a tune's journal) are guarded, not copied.
        marked = [os.path.dirname(p) for p in self.snapshot.entries if os.path.basename(p) == MARKER]
        files = sorted(((p.count(os.sep), e.size, p) for p, e in self.snapshot.entries.items()
                        if stat.S_ISREG(e.mode) and e.size <= INSURED_FILE_BYTES
                        and not any(under(p, m) for m in marked)), key=lambda f: f[:2])
        copies, total = {}, 0
        for _, size, path in files:
            if total + size > INSURED_BYTES:
                break
            copy = folder / str(len(copies))
            try:
                folder.mkdir(exist_ok=True)
                shutil.copy2(path, copy, follow_symlinks=False)
            except OSError:
                continue  # unreadable: the guard still keeps it if Python changes it
            copies[path], total = str(copy), total + size
        save_insured(self.journal_dir, copies, self.snapshot.entries)
        return copies

    def settle(self) -> UserWrites:
        """Put the user's folders back, the run's writes into ``writes/``; once the tree has ended."""
        lines = read_journal(self.journal_dir)
        held = {**journal_held(lines), **(self._held.stop() if self._held is not None else {})}
        inodes = read_held(self.journal_dir) | {h.inode for h in held.values()}
        write_insured_lines(self.journal_dir, insured_lines(self.insured, self.snapshot.entries, inodes))
        seen = {line["path"] for line in lines if line["op"] in (KEPT, CREATED)}
        writes = settle(self.snapshot, self.journal_dir, self.writes_dir, inodes)
        writes = self._name_out_of_sight(writes, held, seen)
        shutil.rmtree(self.journal_dir, ignore_errors=True)
        if self.writes_dir.is_dir() and not any(self.writes_dir.iterdir()):
            self.writes_dir.rmdir()
        if self.ledger is not None:
            with open(self.ledger, "a", encoding="utf-8") as fh:
                fh.write(strict_json.dumps(writes.to_dict()) + "\n")
        return writes

    def _name_out_of_sight(self, writes: UserWrites, held: dict[str, HeldFile], seen: set[str]) -> UserWrites:
        """``writes`` with the held files that changed past the guard named (:func:`.out_of_sight`):
        those settling did not put back, move or name already."""
        covered = self.snapshot.complete
        named = out_of_sight(held, started_ns=self.snapshot.taken_ns, kind=Keeper(self._spec()).kind,
                             settled=lambda p: p in seen or (covered and self.snapshot.covers(p)))
        if not named:
            return writes
        extra = [NotRestored(self.snapshot.shown(p), OUT_OF_SIGHT) for p in named]
        return dataclasses.replace(writes, not_restored=[*writes.not_restored, *extra])


def own_output_files(fds: Iterable[int] = (1, 2)) -> tuple[str, ...]:
    """The files torchboost's own standard output and error go to (``torchboost doctor --
    python train.py > log.txt 2>&1``): the place the user chose for torchboost's words and
    the script's relayed output, written by torchboost itself, so neither kept apart nor
    named. Found through ``/proc/self/fd`` (none where there is no ``/proc``), each checked
    to be the very file the descriptor holds."""
    found = []
    for fd in fds:
        try:
            held = os.fstat(fd)
            path = os.path.realpath(os.readlink(f"/proc/self/fd/{fd}"))
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(held.st_mode) and (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino):
            found.append(path)
    return tuple(dict.fromkeys(found))


REWRITTEN = OUT_OF_SIGHT
"""Why an insured file rewritten while no process of the run held it is not put back."""
GREW = OUT_OF_SIGHT
"""Why an insured file that grew, held by no process of the run, is not put back."""


def summed_writes(ledger: Path) -> dict[str, Any] | None:
    """What many runs' scripts wrote in the user's folders, summed from a ledger
    (:attr:`RunGuard.ledger`): ``{"line", "runs", "paths": [{"path", "times", "runs"}],
    "made": [paths no process of a run was seen making], "not_restored": [{"path", "why"}]}``;
    None when no run was guarded."""
    try:
        runs = [json.loads(line) for line in Path(ledger).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    if not runs:
        return None
    paths: dict[str, dict[str, Any]] = {}
    made: list[str] = []
    for run in runs:
        for written in run["kept_apart"]:
            if not written.get("seen", True):  # the user's, maybe: named apart, never said the script's
                made.append(written["path"])
                continue
            # A new folder per run (runs/<time>/) is one entry, named by where they were made;
            # one made in the user's folder itself (out/, the same each run) by its own name.
            new_folder = written["new"] and written["entries"] > 1
            name = os.path.join(os.path.dirname(written["path"]) or written["path"], "…") if new_folder else written["path"]
            entry = paths.setdefault(name, {"path": name, "times": 0, "runs": 0})
            entry["times"] += written["times"]
            entry["runs"] += 1
    bad = list({n["path"]: n for run in runs for n in run["not_restored"]}.values())
    line = _summed_line(len(runs), list(paths.values()), list(dict.fromkeys(made)), bad, runs[-1]["writes_dir"])
    return {"line": line, "runs": len(runs), "paths": list(paths.values()), "made": list(dict.fromkeys(made)),
            "not_restored": bad}


def _listed(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _summed_line(runs: int, paths: list[dict[str, Any]], made: list[str], bad: list[dict[str, Any]],
                 last_dir: str) -> str:
    if not paths and not made and not bad:
        return f"your folders: the script wrote nothing there in {runs} runs"
    said = [f"your folders: in {runs} runs"]
    if paths:
        named = [f"{p['path']} ({p['times']} times in {p['runs']} runs)" if p["times"] else p["path"] for p in paths[:3]]
        more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
        said.append(f" the script wrote {', '.join(named)}{more}; each run's writes were moved out of them (the last "
                    f"run's are in {last_dir.rstrip(os.sep)}{os.sep})")
    if made:
        said.append(f"{';' if paths else ''} made outside torchboost's sight, left where it is: {_listed(made)}")
    if not bad:
        return "".join(said) + f"; {AS_THEY_WERE}"
    unseen = [n["path"] for n in bad if n["why"] == OUT_OF_SIGHT]
    other = [f"{n['path']} ({n['why']})" for n in bad if n["why"] != OUT_OF_SIGHT]
    if unseen:
        said.append(f"; {OUT_OF_SIGHT}: {_listed(unseen)}")
    if other:
        said.append("; NOT restored: " + ", ".join(other[:3]))
    return "".join(said)
