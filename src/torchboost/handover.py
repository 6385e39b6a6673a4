"""The hand-over from ``torchboost tune`` to a trial process, and who applies what there.

``torchboost tune`` runs the user's script once per candidate. The trial's whole
configuration (the user's ``torchboost.toml``, or plain PyTorch without one, with the
candidate's settings on top) travels once: the trial's parent writes it to a JSON file
and sets one environment variable, ``TORCHBOOST_TRIAL_SETTINGS``, to its path. Inside the
trial both appliers read that one file through :func:`trial_config`: the no-code applier
(:mod:`torchboost.observe.apply`) applies its concrete changes as ``torchboost run``
would, and a :class:`torchboost.Booster` in the script uses it instead of the file it
would read. It is what tune writes to ``torchboost.toml`` when the candidate wins, so
what is measured is what is written. Nothing else in torchboost reads the environment for
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

from torchboost.config import BoostConfig, ConfigError

__all__ = ["TRIAL_SETTINGS_ENV", "claim", "claimed", "claims", "trial_config", "write_trial_config"]

TRIAL_SETTINGS_ENV = "TORCHBOOST_TRIAL_SETTINGS"
"""Names the JSON file of a trial's settings; set only by ``torchboost tune`` for its trials."""

_claimed: set[str] = set()
"""Names of the techniques a Booster in this process applies itself."""


def trial_config() -> BoostConfig | None:
    """The current trial's configuration, or None outside a trial."""
    path = os.environ.get(TRIAL_SETTINGS_ENV)
    if not path:
        return None
    try:
        return BoostConfig.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{TRIAL_SETTINGS_ENV}: {path}: {exc}") from None


def write_trial_config(path: Path, config: BoostConfig) -> None:
    """Write a trial's configuration file (the parent side of the hand-over)."""
    path.write_text(json.dumps(config.to_dict(), sort_keys=True), encoding="utf-8")


def claim(techniques: Iterable[str]) -> None:
    """Called by ``Booster.prepare`` with the techniques it applies in this process."""
    _claimed.update(techniques)


def claimed(technique: str) -> bool:
    """Whether a Booster in this process applies ``technique`` itself."""
    return technique in _claimed


def claims() -> frozenset[str]:
    """Every technique a Booster in this process has claimed so far."""
    return frozenset(_claimed)
