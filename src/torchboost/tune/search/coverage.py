"""What a kept change covered: a technique applied from outside at the root module (bf16
autocast around its forward) covers that module alone, and the loop may train others
beside it (three modules combined in the script's body). The trials say so in their
``applied`` words (:class:`~torchboost.nocode.Applier`); the decisions on those changes
carry it in their reason, so the report and torchboost.toml say what was judged: the
change on the modules it covered, not on the whole step.
"""

from __future__ import annotations

from typing import Any, Iterable

from torchboost.tune.search.decision import Decision
from torchboost.tune.trials.trial_result import TrialResult

__all__ = ["CoverageNotes", "COVERS"]

COVERS = "(covers "
"""How a partial coverage begins in an applied note: "bf16 autocast around Linear.forward
(covers enc1, 1 of the 3 modules the loop trains; enc2 and head run outside it)"."""


class CoverageNotes:
    """The partial-coverage notes of the trials seen, by the settings each trial ran."""

    def __init__(self) -> None:
        self._seen: list[tuple[dict[str, Any], list[str]]] = []

    def record(self, result: TrialResult) -> None:
        """Keep ``result``'s notes of partial coverage, if any."""
        notes = [note for note in result.applied if COVERS in note]
        if notes:
            self._seen.append((dict(result.settings), notes))

    def annotate(self, decisions: Iterable[Decision]) -> None:
        """Add to each decision's reason what its change covered, when a trial that ran the
        change said it covers part of what the loop trains."""
        for decision in decisions:
            change = dict(decision.settings)
            notes = next((n for settings, n in self._seen
                          if change and all(settings.get(k) == v for k, v in change.items())), None)
            if notes:
                decision.reason = f"{decision.reason}; applied from outside: {'; '.join(notes)}"
