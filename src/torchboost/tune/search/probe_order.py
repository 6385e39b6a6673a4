"""What the doctor measured, as the search reads it: the quick probes order the levers, and
a lever whose own change they timed slower than plain is skipped with that evidence.

The doctor times a few steps with each switchable finding's fix on against plain steps,
interleaved, in the script's own process (:mod:`torchboost.observe.probes.quick`). Those
ratios are measurements on the script itself: a better guide to where the budget pays
than the estimates, and a lever measured slower there is not worth a trial.
"""

from __future__ import annotations

from typing import Any

from torchboost.evidence.findings import Measured
from torchboost.tune.search.levers import Lever, TuneContext

__all__ = ["measured_from_facts", "measured_slower", "why_not_tried", "lever_measurement"]


def measured_from_facts(facts: Any) -> dict[str, Measured]:
    """Each quick probe that gave a ratio, by the finding id it switched."""
    return {p.finding_id: Measured.of(p) for p in getattr(facts, "quick_probes", []) or [] if p.ratio is not None}


def lever_measurement(lever: Lever, context: TuneContext) -> Measured | None:
    """The doctor's measurement of this lever's own change, when a quick probe timed it."""
    return context.measured.get(lever.probed_by) if lever.probed_by else None


def measured_slower(lever: Lever, context: TuneContext) -> str | None:
    """The evidence, in words, that the doctor measured this lever's change slower than plain
    steps ("the doctor measured x0.66 over 6 steps (bf16 autocast against plain steps,
    interleaved): slower here"); None when it was not measured, or not slower."""
    measured = lever_measurement(lever, context)
    if measured is None or not measured.hopeless:
        return None
    what = f" ({measured.label} against plain steps, interleaved)" if measured.label else ""
    return f"the doctor measured x{measured.ratio:.2f} over {measured.steps} steps{what}: slower here"


def why_not_tried(lever: Lever, context: TuneContext) -> str | None:
    """Why the lever is skipped untried: the lever's own evidence (a probe of the machine),
    or the doctor's measurement of its change on the script; None when it is worth a trial."""
    own = lever.hopeless(context) if lever.hopeless is not None else None
    return own or measured_slower(lever, context)
