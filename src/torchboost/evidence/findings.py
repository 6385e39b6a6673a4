"""Finding: one diagnosis, with its evidence, its fix and the gain expected from it.

A finding's fix is a partial configuration (:class:`~torchboost.config.Overlay`), never
text: its ``torchboost.toml`` lines, its plain-PyTorch lines and its Lightning,
Accelerate and Hugging Face spellings are rendered from that value by the techniques'
own spellings (:func:`torchboost.frameworks.fix_words`), so each is written once, in
the technique's module. What no setting can change (the batch size, an ``.item()`` in
the loop) is ``advice``: one sentence, and the script's lines in ``advice_code``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Union

from torchboost.config import Overlay
from torchboost.evidence.quick_probe import pairs_agree

__all__ = ["Finding", "Evidence", "Measured", "severity_for"]

Evidence = dict[str, Union[float, int, str]]
"""The numbers (and a few words) a finding rests on, keyed by name with units in the name."""

SEVERITIES = ("high", "medium", "low")
UNITS = ("step", "sample")


def severity_for(expected_speedup: float) -> str:
    """"high" from a 1.25x expected speedup, "medium" from 1.05x, else "low"."""
    if expected_speedup >= 1.25:
        return "high"
    if expected_speedup >= 1.05:
        return "medium"
    return "low"


@dataclass(frozen=True)
class Measured:
    """A finding's fix measured by the doctor itself: a few steps with it switched on against
    plain steps, interleaved, in the script's own process (a quick probe)."""

    ratio: float
    """The median over the pairs of plain step time / switched step time (above 1 is faster)."""
    steps: int
    """The timed steps it rests on, plain and switched."""
    label: str = ""
    """What was switched on, in words ("bf16 autocast")."""
    low: float | None = None
    """The smallest of the pairs' ratios (None: not recorded)."""
    high: float | None = None
    """The largest of the pairs' ratios (None: not recorded)."""

    @classmethod
    def of(cls, probe: Any) -> "Measured":
        """A quick probe's measurement (a :class:`~torchboost.evidence.observed.QuickProbeFacts`
        that gave a ratio)."""
        pairs = probe.pair_ratios
        return cls(ratio=probe.ratio, steps=probe.steps, label=probe.label, low=min(pairs), high=max(pairs))

    @property
    def agree(self) -> bool:
        """Every pair on the same side of 1 as the median: the pairs measured one way. Pairs
        that disagree (another process slowed some steps many times over) measured nothing.
        The rule tune's bursts decide by too (:func:`~torchboost.evidence.quick_probe.pairs_agree`)."""
        if self.low is None or self.high is None:
            return True
        return pairs_agree((self.low, self.high), self.ratio)

    @property
    def hopeless(self) -> bool:
        """Measured slower than plain, every pair of it: the finding ranks last and says so."""
        return self.ratio < 1.0 and self.agree

    def words(self) -> str:
        """"measured over 4 steps: x2.30" (", slower than plain" when it was; the pairs'
        range when they disagree)."""
        if not self.agree:
            return (f"measured over {self.steps} steps: x{self.ratio:.2f}, its pairs from x{self.low:.2f} to "
                    f"x{self.high:.2f}: no measurement either way")
        return f"measured over {self.steps} steps: x{self.ratio:.2f}" + (", slower than plain" if self.hopeless else "")


@dataclass
class Finding:
    """What bounds the step, why we think so, and what to change.

    ``expected_speedup`` is the estimated ratio old step time / new step time (above 1
    is faster) for this change alone, computed by ``formula`` from ``evidence``.
    """

    id: str
    """Stable identifier, e.g. "data.workers"; one per rule in ``RULES``."""
    title: str
    """One line, in words a PyTorch user would use."""
    evidence: Evidence
    """The numbers the finding rests on (units in the keys: ``_ms``, ``_pct``, ``_bytes``)."""
    expected_speedup: float
    """Estimated step-time ratio before / after the fix (> 1 is faster)."""
    formula: str
    """How ``expected_speedup`` was computed, with the inputs' values."""
    fix: Overlay = field(default_factory=Overlay)
    """The settings that apply the fix; empty when no ``torchboost.toml`` key does."""
    advice: str = ""
    """What to change in the script that no setting changes, in words (shown as a TOML
    comment: ``# no torchboost.toml key: ...`` when ``fix`` is empty)."""
    advice_code: str = ""
    """That change in the script's own lines, plain PyTorch."""
    severity: str = ""
    """"high" | "medium" | "low"; derived from ``expected_speedup`` when left empty."""
    notes: list[str] = field(default_factory=list)
    """Caveats: assumptions, costs, what to check after applying the fix."""
    changes_training: bool = False
    """The fix changes what is trained (batch size, learning rate...), not only how fast:
    such findings are listed apart from the neutral speedups, never ranked with them."""
    unit: str = "step"
    """What ``expected_speedup`` is a ratio of: "step" (time per optimizer step, the same
    samples per step) or "sample" (time per training sample, when the step's size changes)."""
    memory_ratio: float | None = None
    """For a fix that trades time for memory: the expected peak memory before / after
    (above 1 is less memory); ``expected_speedup`` is then its time cost (below 1). Such
    findings are listed apart, as the way to fit in memory, never ranked as speedups."""
    blocking: bool = False
    """The run is wrong before it is slow (its loss is NaN or inf): listed first, above every
    speedup, whatever ``expected_speedup`` says (1.0: no speed is at stake)."""
    dtype: str = ""
    """The dtype the fix moves the step's matmuls to ("bf16", "fp16", "tf32"), as the machine
    probe names it; empty: the step's own. Its gain is capped by that dtype's peak."""
    measured: Measured | None = None
    """The fix timed on the script itself (a quick probe), beside the estimate: findings are
    ranked by it where it exists; None: estimated only."""

    def __post_init__(self) -> None:
        if not self.severity:
            self.severity = severity_for(self.rank_speedup)
        if self.unit not in UNITS:
            raise ValueError(f"Finding.unit: expected one of {', '.join(UNITS)}; got {self.unit!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"Finding.severity: expected one of {', '.join(SEVERITIES)}; got {self.severity!r}")

    @property
    def rank_speedup(self) -> float:
        """What the finding is ranked by: the measured ratio where its pairs agree, else the
        estimate, at most the best of its pairs where it was measured: pairs from x0.98 to
        x1.08 show no gain either way, and an estimate of x1.92 ranked above a switch whose
        pairs agree on x1.69 would put first what the doctor saw gain nothing."""
        measured = self.measured
        if measured is None:
            return self.expected_speedup
        if measured.agree:
            return measured.ratio
        return min(self.expected_speedup, measured.high) if measured.high is not None else self.expected_speedup

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict: the fields as named here (``fix`` by dotted names; its spellings are
        :func:`torchboost.frameworks.finding_words`')."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(evidence=dict(self.evidence), notes=list(self.notes), fix=self.fix.to_dict(),
                    measured=dataclasses.asdict(self.measured) if self.measured is not None else None)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        """Inverse of :meth:`to_dict`; unknown keys (the rendered spellings) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["fix"] = Overlay.from_dict(kwargs.get("fix") or {})
        if kwargs.get("measured") is not None:
            kwargs["measured"] = Measured(**kwargs["measured"])
        return cls(**kwargs)
