"""The tuning journal: one JSON line per finished trial, flushed as it is written.

A kill loses at most the trial in flight; ``--resume`` reads the journal back and the
search replays recorded trials instead of running them again. Because the search is
deterministic given its measurements, a resumed run chooses what an uninterrupted run
with the same journal would.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from torchboost.tune.trial_result import TrialResult, trial_key

__all__ = ["Journal", "RunJournal"]


class Journal:
    """Append-only JSONL file of :class:`TrialResult`, keyed by (settings, repeat)."""

    def __init__(self, path: str | Path, *, resume: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._recorded: dict[str, TrialResult] = {}
        self.reused = 0
        """Trials answered from the journal instead of being run."""
        if resume and self.path.exists():
            for result in self._read():
                self._recorded[trial_key(result.settings, result.repeat)] = result
        elif self.path.exists():
            self.path.unlink()  # a fresh run starts a fresh journal

    def _read(self) -> Iterator[TrialResult]:
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield TrialResult.from_dict(json.loads(line))
                except (json.JSONDecodeError, TypeError, KeyError):
                    # A line cut short by a kill mid-write: that trial simply reruns.
                    continue

    def lookup(self, settings: dict[str, Any], repeat: int) -> TrialResult | None:
        """The recorded result of this trial, if the journal has it."""
        found = self._recorded.get(trial_key(settings, repeat))
        if found is not None:
            self.reused += 1
        return found

    def append(self, result: TrialResult) -> None:
        """Record a finished trial durably (flush + fsync) before the search goes on."""
        self._recorded[trial_key(result.settings, result.repeat)] = result
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(result.to_dict(), sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def results(self) -> list[TrialResult]:
        """Every recorded result, in no particular order."""
        return list(self._recorded.values())


class RunJournal:
    """The end-to-end check's runs, one JSON line each (``{"key", "seconds"}``), so that
    ``--resume`` replays them as the search replays its trials."""

    def __init__(self, path: str | Path, *, resume: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._recorded: dict[str, float] = {}
        if resume and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._recorded[str(entry["key"])] = float(entry["seconds"])
                except (json.JSONDecodeError, TypeError, KeyError, ValueError):
                    continue  # a line cut short by a kill: that run simply reruns
        elif self.path.exists():
            self.path.unlink()

    def get(self, key: str) -> float | None:
        """The recorded seconds of this run, if any."""
        return self._recorded.get(key)

    def put(self, key: str, seconds: float) -> None:
        """Record a finished run durably."""
        self._recorded[key] = seconds
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"key": key, "seconds": seconds}, sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
