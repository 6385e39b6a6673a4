"""One observed run's write guard, from the parent's side: the user's folders recorded
before the command starts, the guard's spec handed to its processes, the folders settled
after the whole tree has ended.

The user's folders are the working directory and the script's folder. The run may write
freely in the ``--out`` folder, the temp directory and the caches
(:func:`~torchboost.observe.guard_spec.default_exempt`); what the script writes anywhere
else is kept apart in ``<out>/writes/`` after the run, and every file that existed before
it is put back (:mod:`.user_files`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

from torchboost.observe.guard_spec import WriteGuardSpec, default_exempt
from torchboost.observe.parent.folder_snapshot import FolderSnapshot
from torchboost.observe.parent.user_files import UserWrites, settle

__all__ = ["WRITES_DIR", "RunGuard", "summed_writes"]

WRITES_DIR = "writes"
"""Folder inside ``--out`` where a run's writes in the user's folders are kept apart."""
_JOURNAL_DIR = ".journal"


class RunGuard:
    """Records the user's folders now (:meth:`spec` for the processes); :meth:`settle` after."""

    def __init__(self, out: Path, script: Path | None, *, also_exempt: Iterable[str] = (),
                 ledger: Path | None = None) -> None:
        self.ledger = ledger
        """A JSON-lines file each :meth:`settle` appends its :class:`UserWrites` to (tune's
        many runs, summed in its report); None: none kept."""
        self.writes_dir = Path(out) / WRITES_DIR
        shutil.rmtree(self.writes_dir, ignore_errors=True)  # an earlier run's, in torchboost's own folder
        self.journal_dir = self.writes_dir / _JOURNAL_DIR
        self.journal_dir.mkdir(parents=True)
        roots = [os.getcwd()] + ([str(Path(script).resolve().parent)] if script is not None else [])
        exempt = default_exempt(Path(out).resolve(), home=Path.home(), temp_dir=tempfile.gettempdir(),
                                environ=os.environ)
        self.exempt = tuple(dict.fromkeys([*exempt, *(os.path.realpath(p) for p in also_exempt)]))
        self.snapshot = FolderSnapshot.take(roots, exempt=self.exempt)

    @property
    def note(self) -> str | None:
        """What cannot be protected, said before the run starts (a folder too large to record)."""
        return self.snapshot.note

    def spec(self) -> dict[str, Any]:
        """The guard's spec for the processes of the run (:class:`WriteGuardSpec` as a dict)."""
        return WriteGuardSpec(str(self.journal_dir.resolve()), self.snapshot.taken_ns, self.snapshot.roots,
                              self.exempt).to_dict()

    def settle(self) -> UserWrites:
        """Put the user's folders back, the run's writes into ``writes/``; once the tree has ended."""
        writes = settle(self.snapshot, self.journal_dir, self.writes_dir)
        shutil.rmtree(self.journal_dir, ignore_errors=True)
        if self.writes_dir.is_dir() and not any(self.writes_dir.iterdir()):
            self.writes_dir.rmdir()
        if self.ledger is not None:
            with open(self.ledger, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(writes.to_dict()) + "\n")
        return writes


def summed_writes(ledger: Path) -> dict[str, Any] | None:
    """What many runs' scripts wrote in the user's folders, summed from a ledger
    (:attr:`RunGuard.ledger`): ``{"line", "runs", "paths": [{"path", "times", "runs"}],
    "not_restored": [{"path", "why"}]}``; None when no run was guarded."""
    try:
        runs = [json.loads(line) for line in Path(ledger).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    if not runs:
        return None
    paths: dict[str, dict[str, Any]] = {}
    for run in runs:
        for written in run["kept_apart"]:
            # A new folder per run (runs/<time>/) is one entry, named by where they were made.
            new_folder = written["new"] and written["entries"] > 1
            name = os.path.join(os.path.dirname(written["path"]), "…") if new_folder else written["path"]
            entry = paths.setdefault(name, {"path": name, "times": 0, "runs": 0})
            entry["times"] += written["times"]
            entry["runs"] += 1
    bad = list({n["path"]: n for run in runs for n in run["not_restored"]}.values())
    return {"line": _summed_line(len(runs), list(paths.values()), bad, runs[-1]["writes_dir"]), "runs": len(runs),
            "paths": list(paths.values()), "not_restored": bad}


def _summed_line(runs: int, paths: list[dict[str, Any]], bad: list[dict[str, Any]], last_dir: str) -> str:
    if not paths and not bad:
        return f"your folders: the script wrote nothing there in {runs} runs"
    named = [f"{p['path']} ({p['times']} times in {p['runs']} runs)" if p["times"] else p["path"] for p in paths[:3]]
    more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
    line = (f"your folders: in {runs} runs the script wrote {', '.join(named)}{more}; each run's writes were "
            f"moved out of them (the last run's are in {last_dir.rstrip(os.sep)}{os.sep})")
    if not bad:
        return line + "; your files are as they were"
    return line + "; NOT restored: " + ", ".join(f"{n['path']} ({n['why']})" for n in bad[:3])
