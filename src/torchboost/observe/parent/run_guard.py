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

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

from torchboost.observe.guard_spec import WriteGuardSpec, default_exempt
from torchboost.observe.parent.folder_snapshot import FolderSnapshot
from torchboost.observe.parent.user_files import UserWrites, settle

__all__ = ["WRITES_DIR", "RunGuard"]

WRITES_DIR = "writes"
"""Folder inside ``--out`` where a run's writes in the user's folders are kept apart."""
_JOURNAL_DIR = ".journal"


class RunGuard:
    """Records the user's folders now (:meth:`spec` for the processes); :meth:`settle` after."""

    def __init__(self, out: Path, script: Path | None, *, also_exempt: Iterable[str] = ()) -> None:
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
        return writes
