"""TrialResult: what one trial of one candidate measured, as plain data."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping

from torchboost.config import Overlay

__all__ = ["TrialResult", "trial_key", "describe_settings"]


def trial_key(settings: Mapping[str, Any], repeat: int, bursts: Mapping[str, Any] | None = None) -> str:
    """A stable key for (candidate settings, repeat index), and the change a burst trial
    alternated on top of them (none: an ordinary trial)."""
    key: dict[str, Any] = {"settings": Overlay(settings).to_dict(), "repeat": repeat}
    if bursts:
        key["bursts"] = Overlay(bursts).to_dict()
    return json.dumps(key, sort_keys=True)


def describe_settings(settings: Mapping[str, Any]) -> str:
    """Short text for a candidate: ``cpu.threads=1, loader.num_workers=2`` or ``baseline``."""
    return Overlay(settings).describe()


@dataclass
class TrialResult:
    """One run of the user's script with one candidate configuration.

    ``settings`` are the changes from the user's own setup (empty for the baseline). Times are milliseconds, memory bytes.
    """

    settings: Overlay
    repeat: int = 0
    ok: bool = True
    """False when the trial crashed or timed out (non-finite losses are parity's to judge)."""
    error: str | None = None
    step_ms: list[float] = field(default_factory=list)
    """Per measured step (warm-up excluded)."""
    losses: list[float] = field(default_factory=list)
    """Per step from the first, warm-up included (parity compares from step 0)."""
    samples_per_step: int | None = None
    peak_memory_bytes: int = 0
    compile_s: float = 0.0
    """Seconds compiling (torch.compile's own count when it compiled, else the extra time
    the warm-up steps took over measured steps)."""
    compile_cache: str = ""
    """"cold" (it compiled from scratch), "warm" (every graph came from the compile cache),
    "" (nothing compiled)."""
    wall_s: float = 0.0
    fixed_s: float = 0.0
    """Seconds of the trial's process outside its steps at their mean pace: start-up,
    imports, loader workers' start, compile's extra, teardown. What a setting costs once,
    whatever the run's length."""
    load_pct: float = 0.0
    """Other processes' CPU use during the trial, percent of the whole machine."""
    stopped_early: bool = False
    """Stopped after its first steps: already far slower than the incumbent."""
    stopped_decided: str | None = None
    """"faster" or "slower": stopped once its steps decided its ratio to the incumbent
    beyond noise (a sequential stop); its steps are then fewer than asked, and all it has."""
    traceback: str = ""
    """The script's traceback when the trial failed with one ('' otherwise)."""
    applied: list[str] = field(default_factory=list)
    """What its settings did in the script, in words (``Facts.applied``): a technique applied
    at the root module says which of the modules the loop trains it covers."""
    bursts: dict[str, Any] = field(default_factory=dict)
    """A burst trial's candidate change, alternated in-process on top of ``settings``
    (:mod:`torchboost.tune.search.bursts`); empty for an ordinary trial."""
    burst_plain_ms: list[float] = field(default_factory=list)
    """A burst trial's plain steps (``settings`` alone), milliseconds, in order."""
    burst_switched_ms: list[float] = field(default_factory=list)
    """A burst trial's switched steps (the change on), each after its plain one."""
    burst_error: str | None = None
    """Why a burst trial gave no ratio (no switch makes the change here, a step raised)."""

    @property
    def burst_ratios(self) -> list[float]:
        """Each pair's switched over plain step time: the candidate's ratio to the incumbent
        (below 1 faster), as the search's pairs give it; empty without a burst measure."""
        if self.burst_error:
            return []
        return [s / p for p, s in zip(self.burst_plain_ms, self.burst_switched_ms) if p > 0]

    @property
    def ms_per_step(self) -> float:
        """Measured time per step: total over the measured steps / their count, i.e. what
        throughput sees. +inf for a failed trial (never the fastest).

        Not the median: a loader that cannot keep up makes most steps fast and a few very
        slow (the queue empties, the step waits); a median hides those stalls. Measured
        here on the vision workload with 2 workers: median 9.9 ms, mean 12.6 ms, and the
        mean is what a training run's wall time follows.
        """
        if not self.ok or not self.step_ms:
            return math.inf
        return statistics.fmean(self.step_ms)

    @property
    def median_step_ms(self) -> float:
        """Median measured step time (a typical step; see :attr:`ms_per_step`)."""
        if not self.ok or not self.step_ms:
            return math.inf
        return statistics.median(self.step_ms)

    @property
    def samples_per_s(self) -> float | None:
        """Throughput from :attr:`ms_per_step`, when the batch size is known."""
        if self.samples_per_step is None or not math.isfinite(self.ms_per_step):
            return None
        return 1e3 * self.samples_per_step / self.ms_per_step

    def __post_init__(self) -> None:
        self.settings = Overlay(self.settings)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        return {**dataclasses.asdict(self), "settings": self.settings.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrialResult":
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
