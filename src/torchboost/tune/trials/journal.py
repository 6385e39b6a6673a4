"""The tuning journal: one JSON line per finished trial, flushed as it is written.

A kill loses at most the trial in flight; ``--resume`` reads the journal back and the
search replays recorded trials instead of running them again. Because the search is
deterministic given its measurements, a resumed run chooses what an uninterrupted run
with the same journal would.

Each journal starts with a header line naming what it measured: the command and a hash
of the script's content. ``--resume`` with another command or an edited script starts a
fresh journal and says why (:attr:`Journal.restarted`): old measurements of other code
must not pass for this one's. A failed trial is not replayed: it runs again, since the
failure may be what the user just fixed. A line cut short by a kill mid-write is cut
off before anything is appended, so it cannot swallow the next line.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from torchboost import _json as strict_json
from torchboost.tune.trials.trial_result import TrialResult, trial_key

__all__ = ["Journal", "RunJournal", "identity", "script_digest"]


def script_digest(script: Path | None) -> str | None:
    """The script's content hash (the first 16 hex digits of its sha256); None without a file."""
    return hashlib.sha256(script.read_bytes()).hexdigest()[:16] if script and script.is_file() else None


def identity(command: Sequence[str], script: Path | None) -> dict[str, Any]:
    """What a journal's measurements belong to: the command, and the script's content hash."""
    return {"command": list(command), "script_sha256": script_digest(script)}


class _Lines:
    """An append-only JSON-lines file with an identity header (see the module docstring):
    what both journals write through."""

    def __init__(self, path: str | Path, *, resume: bool, ident: dict[str, Any] | None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.ident = ident
        self.restarted: str | None = None
        """Why ``--resume`` started afresh (the command or the script changed), else None."""
        self.entries: list[dict[str, Any]] = []
        if resume and self.path.exists():
            _repair(self.path)
            header, *self.entries = _parse(self.path) or [{}]
            self.restarted = _mismatch(header.get("identity"), ident)
            if self.restarted:
                self.entries = []
        if not resume or self.restarted or not self.path.exists():
            self.path.unlink(missing_ok=True)  # a fresh run starts a fresh journal
            self.write({"identity": ident})

    def write(self, entry: dict[str, Any]) -> None:
        """One line, flushed and synced before it returns."""
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(strict_json.dumps(entry, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def _repair(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as fh:
            fh.truncate(data.rfind(b"\n") + 1)


def _parse(path: Path) -> list[dict[str, Any]]:
    entries = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = strict_json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def _mismatch(old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
    if old is None or new is None:
        return None if old == new else "the journal has no record of the command it measured"
    if old.get("command") != new.get("command"):
        return "the command differs from the one the journal measured"
    if old.get("script_sha256") != new.get("script_sha256"):
        return "the script changed since the journal was written"
    return None


class Journal:
    """Append-only JSONL file of :class:`TrialResult`, keyed by (settings, repeat)."""

    def __init__(self, path: str | Path, *, resume: bool = False, ident: dict[str, Any] | None = None):
        self._lines = _Lines(path, resume=resume, ident=ident)
        self.path, self.restarted = self._lines.path, self._lines.restarted
        self._recorded: dict[str, TrialResult] = {}
        self.reused = 0
        """Trials answered from the journal instead of being run."""
        for result in self._results():
            if result.ok:  # a failed trial runs again: the failure may be what was fixed
                self._recorded[trial_key(result.settings, result.repeat, result.bursts)] = result

    def _results(self) -> Iterator[TrialResult]:
        for entry in self._lines.entries:
            try:
                yield TrialResult.from_dict(entry)
            except (TypeError, KeyError, ValueError):
                continue

    def lookup(self, settings: Mapping[str, Any], repeat: int, bursts: Mapping[str, Any] | None = None) -> TrialResult | None:
        """The recorded result of this trial (a burst trial of ``bursts``), if the journal has it."""
        found = self._recorded.get(trial_key(settings, repeat, bursts))
        if found is not None:
            self.reused += 1
        return found

    def append(self, result: TrialResult) -> None:
        """Record a finished trial durably (flush + fsync) before the search goes on."""
        self._recorded[trial_key(result.settings, result.repeat, result.bursts)] = result
        self._lines.write(result.to_dict())

    def results(self) -> list[TrialResult]:
        """Every recorded result, in no particular order."""
        return list(self._recorded.values())


class RunJournal:
    """The end-to-end check's runs, one JSON line each (``{"key", "seconds", "pace_ms",
    "load_pct"}``; the pace of a capped run, else null; other processes' load while it ran,
    null where not measured), so that ``--resume`` replays them as the search replays its
    trials, the load the check judges included."""

    def __init__(self, path: str | Path, *, resume: bool = False, ident: dict[str, Any] | None = None):
        self._lines = _Lines(path, resume=resume, ident=ident)
        self.path, self.restarted = self._lines.path, self._lines.restarted
        self._recorded: dict[str, float] = {}
        self._paces: dict[str, float] = {}
        self._loads: dict[str, float] = {}
        for entry in self._lines.entries:
            try:
                self._recorded[str(entry["key"])] = float(entry["seconds"])
                if entry.get("pace_ms") is not None:
                    self._paces[str(entry["key"])] = float(entry["pace_ms"])
                if entry.get("load_pct") is not None:
                    self._loads[str(entry["key"])] = float(entry["load_pct"])
            except (TypeError, KeyError, ValueError):
                continue

    def get(self, key: str) -> float | None:
        """The recorded seconds of this run, if any."""
        return self._recorded.get(key)

    def pace(self, key: str) -> float | None:
        """The recorded pace (ms per step) of this capped run, if any."""
        return self._paces.get(key)

    def load(self, key: str) -> float | None:
        """Other processes' load while this run ran (percent of the machine), if recorded."""
        return self._loads.get(key)

    def put(self, key: str, seconds: float, pace_ms: float | None = None, load_pct: float | None = None) -> None:
        """Record a finished run (a capped run's pace, the load it ran under) durably."""
        self._recorded[key] = seconds
        if pace_ms is not None:
            self._paces[key] = pace_ms
        if load_pct is not None:
            self._loads[key] = load_pct
        self._lines.write({"key": key, "seconds": seconds, "pace_ms": pace_ms, "load_pct": load_pct})
