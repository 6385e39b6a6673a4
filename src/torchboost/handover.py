"""The hand-over from ``torchboost tune`` to a trial process, and who applies what there.

``torchboost tune`` runs the user's script once per candidate. The candidate's settings
travel once: the trial's parent writes them, as dotted names, to a JSON file and sets
one environment variable, ``TORCHBOOST_TRIAL_SETTINGS``, to its path. Inside the trial
both appliers read that one file through :func:`trial_settings`: the no-code applier
(:mod:`torchboost.observe.apply`) and, when the script prepares one, the
:class:`torchboost.Booster`, which then runs ``BoostConfig.off()`` with those settings on
top, which is what tune writes to ``torchboost.toml`` when the candidate wins, so what is
measured is what is written. Nothing else in torchboost reads the environment for
configuration, and nothing sets this variable except a tuning trial.

A Booster in the script applies the techniques itself, so it *claims* them
(:func:`claim`); the no-code applier leaves a claimed technique alone, so nothing is
applied twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from torchboost.config import ConfigError, Overlay

__all__ = ["TRIAL_SETTINGS_ENV", "claim", "claimed", "claims", "trial_settings", "write_trial_settings"]

TRIAL_SETTINGS_ENV = "TORCHBOOST_TRIAL_SETTINGS"
"""Names the JSON file of a trial's settings; set only by ``torchboost tune`` for its trials."""

_claimed: set[str] = set()
"""Names of the techniques a Booster in this process applies itself."""


def trial_settings() -> Overlay | None:
    """The current trial's settings, or None outside a trial."""
    path = os.environ.get(TRIAL_SETTINGS_ENV)
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return Overlay.from_dict(data)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{TRIAL_SETTINGS_ENV}: {path}: {exc}") from None


def write_trial_settings(path: Path, settings: Overlay) -> None:
    """Write a trial's settings file (the parent side of the hand-over)."""
    path.write_text(json.dumps(Overlay(settings).to_dict(), sort_keys=True), encoding="utf-8")


def claim(techniques: Iterable[str]) -> None:
    """Called by ``Booster.prepare`` with the techniques it applies in this process."""
    _claimed.update(techniques)


def claimed(technique: str) -> bool:
    """Whether a Booster in this process applies ``technique`` itself."""
    return technique in _claimed


def claims() -> frozenset[str]:
    """Every technique a Booster in this process has claimed so far."""
    return frozenset(_claimed)
