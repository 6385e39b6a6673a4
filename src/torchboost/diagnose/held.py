"""What holds a step besides its ops: collectives no op hides, and the script's own Python.

Two of the bounds :mod:`torchboost.diagnose.headroom` names are read here, from the
profiler window's phases (:attr:`~torchboost.evidence.observed.ProfileFacts.phases`): each
phase's wall time, the time of its outermost ops, and the collectives that ran with no op
of the training thread beside them (:func:`~torchboost.evidence.rulekit.collectives`).

    communication share = exposed collective ms / step ms            (the window's own)
    Python of a phase    = wall - ops - exposed collectives           (the window's own)
    its share of a phase = Python / wall
    its share of a step  = share of the phase x the phase's share of the recorded step

A phase whose time is mostly outside its ops (``PYTHON_PHASE_PCT``) and whose Python is a
large part of the step (``PYTHON_BOUND_PCT``) holds the step in the script's Python: its
ops say nothing of what bounds it (1 ms of ops in an 8 s forward), so no roofline is
drawn from them. :func:`python_line` names the user's line that holds it, where the
facts carry sampled lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchboost.evidence.host_lines import without_comment
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import PYTHON_PHASE_PCT, collectives, python_shares
from torchboost.evidence.steps import summarize

__all__ = ["COMMUNICATION_BOUND_PCT", "PYTHON_BOUND_PCT", "PYTHON_PHASE_PCT", "PythonPhase", "communication_words",
           "duration", "python_line", "python_phase"]

COMMUNICATION_BOUND_PCT = 30.0
"""Share of the step collectives hold (no op beside them) from which the step is communication-bound, percent."""
PYTHON_BOUND_PCT = 30.0
"""Share of the step in one phase's Python from which the step is bound by Python, percent."""

_PHASES = ("forward", "backward", "optimizer")
"""The phases whose Python can hold a step (the data wait is its own bound)."""


def duration(ms: float) -> str:
    """Milliseconds as a reader sees them: "1.0 ms", "8.0 s" from a second up."""
    return f"{ms / 1000:.1f} s" if ms >= 1000 else f"{ms:.1f} ms" if ms >= 0.1 else f"{ms:.2g} ms"


def communication_words(facts: Facts) -> tuple[float, str] | None:
    """(percent of the step collectives hold, the bound's words) where that is
    ``COMMUNICATION_BOUND_PCT`` or more; None otherwise."""
    found = collectives(facts)
    if found is None or 100 * found.share < COMMUNICATION_BOUND_PCT:
        return None
    pct = 100 * found.share
    return pct, (f"collectives hold {pct:.0f}% of the step: {duration(found.exposed_ms)} of its "
                 f"{duration(found.step_ms)} with no compute beside them ({found.overlap_pct:.0f}% of their "
                 f"{duration(found.ms)} overlapped)")


@dataclass(frozen=True)
class PythonPhase:
    """A phase whose time is mostly the script's Python, not its ops."""

    phase: str
    wall_ms: float
    """The phase's time per step in the profiler's window."""
    op_ms: float
    """Its outermost ops' time per step there."""
    python_ms: float
    """The rest: its wall less its ops and the collectives it waited for."""
    step_pct: float
    """Its Python's share of the recorded step, percent."""

    @property
    def phase_pct(self) -> float:
        """Share of the phase outside its ops, percent."""
        return 100.0 * self.python_ms / self.wall_ms if self.wall_ms > 0 else 0.0

    def words(self, line: str | None = None) -> str:
        """The bound's words, with the user's line that holds it when known."""
        where = f", most of it at {line}" if line else ""
        return (f"the {self.phase}'s ops take {duration(self.op_ms)} of its {duration(self.wall_ms)}: the rest, "
                f"{self.step_pct:.0f}% of the step, is the script's own Python{where}")


def python_phase(facts: Facts) -> PythonPhase | None:
    """The phase whose Python holds the largest share of the step, where that phase is
    ``PYTHON_PHASE_PCT`` or more outside its ops (:func:`~torchboost.evidence.rulekit.python_shares`)
    and its Python ``PYTHON_BOUND_PCT`` or more of the step; None otherwise, or without the
    window's phases."""
    summary = summarize(facts)
    step_ms = sum(summary.phase_ms.values())
    found = []
    for phase, share in python_shares(facts).items():
        step_pct = 100.0 * share * summary.phase_ms.get(phase, 0.0) / step_ms if step_ms > 0 else 0.0
        if phase in _PHASES and step_pct >= PYTHON_BOUND_PCT:
            times = facts.profile.phases[phase]
            found.append(PythonPhase(phase, times["wall_ms"], times["op_ms"], share * times["wall_ms"], step_pct))
    return max(found, key=lambda p: p.step_pct, default=None)


def python_line(facts: Facts, phase: str) -> str | None:
    """The user's line that holds most of ``phase``'s sampled time, in words ("model.py:14
    (`total += math.sin(v)`)"), where the facts carry the host's sampled lines
    (``facts.host.lines``: each with ``bucket``, the phase; ``file``; ``line``; ``code``;
    ``ms_by_step``); None where they do not."""
    lines = [entry for entry in (getattr(facts.host, "lines", None) or []) if _get(entry, "bucket") == phase]
    if not lines:
        return None
    top = max(lines, key=lambda entry: sum((_get(entry, "ms_by_step") or {}).values()))
    where = f"{str(_get(top, 'file')).rsplit('/', 1)[-1]}:{_get(top, 'line')}"
    code = without_comment(_get(top, "code") or "")
    return f"{where} (`{code}`)" if code else where


def _get(entry: Any, name: str) -> Any:
    return entry.get(name) if isinstance(entry, dict) else getattr(entry, name, None)
