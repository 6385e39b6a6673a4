"""What settling a run found, as plain data: the run's writes kept apart, the user's files
put back, and what could not be; one line for the report (:meth:`UserWrites.words`).

:func:`~torchboost.process.guard.user_files.settle` makes it; the doctor's report, tune's
ledger (:func:`~torchboost.process.guard.run_guard.summed_writes`) and the terminal read it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from torchboost.process.guard.folder_snapshot import printable

__all__ = ["AS_THEY_WERE", "WrittenPath", "NotRestored", "UserWrites", "OUT_OF_SIGHT", "REMOVED_OUT_OF_SIGHT"]

OUT_OF_SIGHT = "changed outside torchboost's sight"
"""Why a user's file changed by a writer the guard could not see (a shell's redirection, a
C library's own writer) is not put back: never said to be the user's doing."""
REMOVED_OUT_OF_SIGHT = "removed outside torchboost's sight"
"""Why a user's file removed past the guard is not put back."""
AS_THEY_WERE = "your folders are as they were, and so is every file the run's Python changed elsewhere"
"""What settling says when nothing is left changed: exactly what it looked at (the user's
folders, compared whole; elsewhere, the files Python's calls changed, put back); a program
outside Python writing outside the user's folders is not seen."""


@dataclass(frozen=True)
class WrittenPath:
    """One thing the run made in the user's folders, now kept apart."""

    path: str
    """As shown: relative to its root, else absolute."""
    times: int
    """Writes the guard counted (a folder: of the files inside it; 0: none seen from Python)."""
    moved_to: str | None
    """Where it is now; None for an empty folder, removed."""
    new: bool
    """It did not exist before the run (else: the script's version of a file put back)."""
    entries: int = 1
    """Entries it holds, itself included (a folder moved whole)."""
    seen: bool = True
    """A process of the run was seen making it, or holding it open (False: new, but made by
    another program, or by the user meanwhile: left where it is, and named)."""


@dataclass(frozen=True)
class NotRestored:
    """A user's entry that settling could not put back as it was."""

    path: str
    """As shown: relative to its root, else absolute."""
    why: str
    """In words ("changed outside Python", the guard's reason)."""


@dataclass(frozen=True)
class UserWrites:
    """What a run wrote in the user's folders, and what settling did with it."""

    writes_dir: str
    """Where the run's writes now are (as shown: relative to the first root when inside it)."""
    kept_apart: list[WrittenPath] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    """The user's entries put back (as shown)."""
    not_restored: list[NotRestored] = field(default_factory=list)
    note: str | None = None
    """The snapshot's note: what could not be looked at."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict, every path printable (a name that is not UTF-8 as ``\\xe9``)."""
        data = dataclasses.asdict(self)
        data["writes_dir"] = printable(data["writes_dir"])
        for written in data["kept_apart"]:
            written["moved_to"] = printable(written["moved_to"]) if written["moved_to"] else None
        return data

    def words(self) -> str:
        """One line for the report: what the script wrote, where it is, whether the user's
        files are as they were."""
        if not self.kept_apart and not self.not_restored:
            return "the script wrote nothing in your folders"
        head = ""
        seen = [w for w in self.kept_apart if w.seen]
        unseen = [w.path for w in self.kept_apart if not w.seen]
        if seen:
            names = [_one(w) for w in seen[:3]]
            if len(seen) > 3:
                names.append(f"{len(seen) - 3} more")
            listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
            head = f"the script wrote {listed}: kept apart in {self.writes_dir.rstrip(os.sep)}{os.sep}; "
        if unseen:
            head += f"made outside torchboost's sight, left where it is: {_listed(unseen)}; "
        if not self.not_restored:
            return head + AS_THEY_WERE
        unseen = [n.path for n in self.not_restored if n.why == OUT_OF_SIGHT]
        bad = [n for n in self.not_restored if n.why != OUT_OF_SIGHT]
        said = [f"{OUT_OF_SIGHT}: {_listed(unseen)}"] if unseen else []
        if bad:
            said.append("NOT restored: " + _listed([f"{n.path} ({n.why})" for n in bad]))
        return head + "; ".join(said)


def _listed(names: list[str], most: int = 3) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _one(written: WrittenPath) -> str:
    if written.entries > 1:
        return f"{written.path}{os.sep}… ({written.entries} new entries)"
    if written.times > 1:
        return f"{written.path} {written.times} times"
    return written.path
