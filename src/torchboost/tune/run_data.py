"""What a tune is asked (:class:`TuneOptions`) and what it produced (:class:`TuneRun`): plain data.

It holds the search's outcome and the check's records, and depends on neither the check nor
anything above it: those records are plain data with the trials' (:mod:`.trials.check_runs`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchboost.config import BoostConfig, Overlay
from torchboost.evidence.observed import Facts
from torchboost.tune.search.decision import TuneOutcome
from torchboost.tune.trials.check_runs import EndToEnd, Unverified

__all__ = ["TuneOptions", "TuneRun"]


@dataclass(frozen=True)
class TuneOptions:
    """How to tune; seconds and steps as named."""

    out_dir: Path = Path("torchboost-tune")
    config_path: Path = Path("torchboost.toml")
    budget_s: float = 600.0
    run_steps: int | None = None
    """Planned length of the real run in steps (compile amortisation); None: from the script."""
    steps_per_trial: int | None = None
    """Measured steps per trial; None: :func:`auto_trial_steps` from the doctor's step time."""
    warmup: int = 5
    resume: bool = False
    trial_timeout_s: float = 300.0
    stall_timeout_s: float = 60.0
    """No step for this long (or 20 median steps) ends a trial, or the doctor, as stalled."""
    min_gain: float = 0.03
    max_repeats: int = 3
    verify_pairs: int = 4
    """End-to-end pairs (baseline, tuned) after the search, at least the four a claim rests
    on; 0 skips the check (and then the figures are the search's per-step ones)."""
    verify_budget_s: float | None = None
    """Seconds the end-to-end check may take; None: half the budget, at least 60."""
    memory_limit_bytes: int | None = None
    """Peak memory a kept configuration must stay under, bytes; None: 90% of the device's
    memory, as the doctor saw it (:func:`torchboost.tune.search.memory_limit.default_memory_limit`)."""

    @property
    def writes_ledger(self) -> Path:
        """Where each run of the tune adds what the script wrote in the user's folders."""
        return self.out_dir / "writes.jsonl"


@dataclass
class TuneRun:
    """Everything a tuning run produced."""

    facts: Facts | None
    findings: list[Any]
    outcome: TuneOutcome
    config: BoostConfig
    run_steps: int | None
    reused_trials: int
    steps_per_trial: int | None = None
    """Measured steps each trial ran (chosen from the doctor's step time unless given)."""
    base: BoostConfig | None = None
    """The configuration the search started from: the user's torchboost.toml, or plain PyTorch."""
    run_steps_source: str = ""
    """How the planned run's length was known, in words."""
    end_to_end: EndToEnd | None = None
    """The tuned configuration against the baseline, end to end (None: not checked)."""
    verdict: str = ""
    """What the end-to-end check decided, in words."""
    peak_flops_per_s: float | None = None
    """The probe's matmul peak for the step's dtype (``peak_dtype``): MFU's denominator."""
    peak_dtype: str = "fp32"
    after_peak_flops_per_s: float | None = None
    """The probe's matmul peak in the dtype the written configuration computes in
    (``after_peak_dtype``: bf16 where it keeps bf16 autocast or bf16 math); None: as before."""
    after_peak_dtype: str = ""
    writes: dict[str, Any] | None = None
    """What the script wrote in the user's folders over the tune's runs (``summed_writes``)."""
    unverified: Unverified | None = None
    """The measured configuration the end-to-end check could not confirm, written apart (None: none)."""
    written: bool = False
    """torchboost.toml was written (or already held this configuration): False when nothing
    changes, where the user's file, or its absence, is left as it was."""
    spent_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds of the tune by part: "diagnosis", "bursts", "trials", "check" and "total"."""
    budget_s: float = 0.0
    """--budget, seconds."""

    @property
    def settings(self) -> Overlay:
        """What was written: the search's kept settings, or none when the end-to-end check
        did not confirm them."""
        return Overlay.between(self.base or BoostConfig.off(), self.config)
