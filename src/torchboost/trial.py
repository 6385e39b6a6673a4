"""The trial-only channel from ``torchboost tune`` to a Booster inside a trial process.

``torchboost tune`` runs the user's script once per candidate. When the script prepares
a :class:`torchboost.Booster`, the candidate's settings must reach that Booster without
editing the script, so the trial's parent sets one environment variable,
``TORCHBOOST_TRIAL_SETTINGS``, to the path of a JSON file of dotted settings
(``{"precision.mode": "bf16"}``; ``{}`` for the baseline trial). In a trial the
Booster runs ``BoostConfig.off()`` with those settings on top, which is what tune writes
to ``torchboost.toml`` when the candidate wins, so what is measured is what is written.
Nothing else in torchboost reads the environment for configuration, and nothing sets
this variable except a tuning trial.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from torchboost.config import BoostConfig, ConfigError

__all__ = [
    "TRIAL_SETTINGS_ENV",
    "boosters_prepared",
    "mark_booster_prepared",
    "overlay",
    "trial_settings",
    "write_trial_settings",
]

TRIAL_SETTINGS_ENV = "TORCHBOOST_TRIAL_SETTINGS"
"""Names the JSON file of a trial's settings; set only by ``torchboost tune`` for its trials."""

_prepared = [0]  # Booster.prepare calls in this process


def trial_settings() -> dict[str, Any] | None:
    """The current trial's settings, or None outside a trial."""
    path = os.environ.get(TRIAL_SETTINGS_ENV)
    if not path:
        return None
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ConfigError(f"{TRIAL_SETTINGS_ENV}: {path} must hold a JSON object of dotted settings")
    return data


def write_trial_settings(path: Path, settings: dict[str, Any]) -> None:
    """Write a trial's settings file (the parent side of the channel)."""
    path.write_text(json.dumps(settings, sort_keys=True), encoding="utf-8")


def overlay(config: BoostConfig, settings: dict[str, Any]) -> BoostConfig:
    """``config`` with dotted settings (``"loader.num_workers": 2``) replaced; validated."""
    changes: dict[str, dict[str, Any]] = {}
    for dotted, value in settings.items():
        section, _, key = dotted.partition(".")
        if not key:
            raise ConfigError(f'setting "{dotted}": expected "section.key"')
        changes.setdefault(section, {})[key] = value
    return config.replace(**changes)


def mark_booster_prepared() -> None:
    """Called by ``Booster.prepare``: the script applies the configuration itself."""
    _prepared[0] += 1


def boosters_prepared() -> int:
    """How many times ``Booster.prepare`` ran in this process; compare two readings to
    learn whether the script prepared a Booster since (no-code levers then stand down)."""
    return _prepared[0]
