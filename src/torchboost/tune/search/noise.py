"""The noise floor, from the incumbent's own runs: each pair's A against the A before it.

The search measures the incumbent (A) beside each candidate (B) in turn, A B A B...; two
A's in a row are the same settings measured twice, so their ratio is what the machine
alone moves a ratio by. The floor is the median departure of those A/A ratios from 1,
and grows more certain with every pair, so the top candidate is measured from the start
instead of after a separate run of A/A repeats (on a slow script those alone can spend
the budget).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from torchboost.config import Overlay
from torchboost.tune.trials.trial_result import TrialResult

__all__ = ["NoiseFloor"]


@dataclass
class NoiseFloor:
    """The A/A ratios seen so far and what they make of the least gain; fractions (0.03 = 3%)."""

    min_gain: float
    """The least gain a kept change must make, whatever the noise."""
    aa_ratios: list[float] = field(default_factory=list)
    """Each incumbent run's ms/step over the incumbent's run before it (the same settings)."""
    fixed_spreads: list[float] = field(default_factory=list)
    """Per incumbent, max minus min of its runs' time outside the steps, seconds."""
    _settings: Overlay | None = None
    _last: TrialResult | None = None
    _fixed: list[float] = field(default_factory=list)

    def add(self, settings: Overlay, run: TrialResult) -> None:
        """One more run of the incumbent ``settings``; a new incumbent starts a new series."""
        if not run.ok:
            return
        if settings != self._settings:
            self._settings, self._last, self._fixed = Overlay(settings), None, []
            self.fixed_spreads.append(0.0)
        if self._last is not None:
            self.aa_ratios.append(run.ms_per_step / self._last.ms_per_step)
        self._last = run
        self._fixed.append(run.fixed_s)
        self.fixed_spreads[-1] = max(self._fixed) - min(self._fixed)

    @property
    def count(self) -> int:
        """A/A ratios measured so far."""
        return len(self.aa_ratios)

    @property
    def noise(self) -> float:
        """The typical departure of one A/A ratio from 1 (the median, not the worst: one
        outlier on a shared machine would otherwise bar every change; verdicts are medians
        of pairs too); 0 before any A/A ratio."""
        return statistics.median(abs(r - 1.0) for r in self.aa_ratios) if self.aa_ratios else 0.0

    @property
    def threshold(self) -> float:
        """A candidate is faster when its median ratio is below this: 1 less the larger of
        the least gain and the noise floor; 0 (nothing is faster beyond noise) when runs
        alike varied by 100% or more."""
        return max(0.0, 1.0 - max(self.min_gain, self.noise))

    @property
    def fixed_noise_s(self) -> float:
        """How much an incumbent's time outside its steps varied between its runs, seconds."""
        return max(self.fixed_spreads, default=0.0)

    def warnings(self, noisy: float, busy_pct: float, baseline_load_pct: float,
                 max_load_pct: float | None = None) -> list[str]:
        """What makes every verdict less reliable: a floor above ``noisy`` (said as the
        machine's when a trial saw other processes above ``busy_pct`` percent of it,
        ``max_load_pct``; else as the script's own), other processes above ``busy_pct``
        while the baseline ran."""
        out = []
        most = baseline_load_pct if max_load_pct is None else max(max_load_pct, baseline_load_pct)
        if self.noise > noisy:
            said = (f"the same settings measured twice in a row varied by {self.noise:.0%} (A/A ratios "
                    f"{', '.join(f'{r:.3f}' for r in self.aa_ratios)})")
            out.append(f"{said}: the machine is too noisy for these verdicts to be reliable; tune again on a "
                       "quieter machine" if most > busy_pct else
                       f"{said} with other processes using at most {most:.0f}% of the machine: the script's own "
                       "runs vary this much, too much for small gains to be told; longer trials "
                       "(--steps-per-trial) would average it out")
        if baseline_load_pct > busy_pct:  # busy throughout: no pair stands out
            out.append(f"other processes used {baseline_load_pct:.0f}% of the machine while the "
                       "baseline ran: every figure here was measured beside them, and a setting's "
                       "gain may differ without them; tune again when they are done")
        return out
