"""The hand-over from ``torchboost tune`` to a trial process, and who applies what there.

``torchboost tune`` runs the user's script once per candidate. The trial's whole
configuration (the user's ``torchboost.toml``, or plain PyTorch without one, with the
candidate's settings on top), resolved once into a :class:`~torchboost.plan.Plan`, travels
once: the trial's parent writes the plan to a JSON file (:func:`write_plan`) and sets one
environment variable, ``TORCHBOOST_TRIAL_SETTINGS``, to its path. Inside the trial the
plan is read once (:func:`trial_plan`, kept for the process): the no-code applier
(:mod:`torchboost.nocode`) applies its settings as ``torchboost run`` would, and a
:class:`torchboost.Booster` in the script uses its configuration instead of the file it
would read. That configuration is what tune writes to ``torchboost.toml`` when the
candidate wins, so what is measured is what is written. Nothing else in torchboost reads
the environment for configuration, and nothing sets this variable except tune (its trials
and its end-to-end check) and ``torchboost run`` of a launcher, for the processes the
command starts.

A Booster in the script applies the techniques itself, so it *claims* them; the no-code
applier leaves a claimed technique alone, so nothing is applied twice, and the observer
reports whether the script used a Booster. The claims are one explicit object,
:class:`Claims`. Inside torchboost it is passed to whoever needs it where they are built:
the observed child's bootstrap and ``torchboost run`` give the same one to the
:class:`~torchboost.nocode.Applier` and the
:class:`~torchboost.observe.record.recorder.StepRecorder`. The one party that cannot be handed
it is the Booster: the user's script builds it, with no torchboost argument to carry it,
in the same process. So there is one ``Claims`` per process, made at import, reached
through one accessor, :func:`process_claims`, which the Booster calls and the bootstrap
and ``torchboost run`` call once to pass it on; nothing else reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from torchboost.config import ConfigError
from torchboost.plan import Plan

__all__ = ["TRIAL_SETTINGS_ENV", "Claims", "process_claims", "trial_plan", "write_plan"]

TRIAL_SETTINGS_ENV = "TORCHBOOST_TRIAL_SETTINGS"
"""Names the JSON file of a trial's settings; set only by ``torchboost tune`` for its trials."""


def trial_plan() -> Plan | None:
    """This process's plan, handed over (None outside a trial): read once, then kept."""
    path = os.environ.get(TRIAL_SETTINGS_ENV)
    if not path:
        return None
    if path not in _READ:
        try:
            _READ[path] = Plan.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{TRIAL_SETTINGS_ENV}: {path}: {exc}") from None
    return _READ[path]


def write_plan(path: Path, plan: Plan) -> None:
    """Write the plan handed over (the parent's side)."""
    path.write_text(json.dumps(plan.to_dict(), sort_keys=True), encoding="utf-8")


_READ: dict[str, Plan] = {}
"""The plans this process has read, by path: one in a trial."""


class Claims:
    """The techniques a Booster applies itself, by name (see the module docstring).

    Only ever grows: a Booster prepared once has applied what it claimed.
    """

    def __init__(self) -> None:
        self._names: set[str] = set()

    def claim(self, techniques: Iterable[str]) -> None:
        """Called by ``Booster.prepare`` with the techniques it applies."""
        self._names.update(techniques)

    def claimed(self, technique: str) -> bool:
        """Whether a Booster applies ``technique`` itself."""
        return technique in self._names

    def names(self) -> frozenset[str]:
        """Every technique claimed so far."""
        return frozenset(self._names)


_PROCESS_CLAIMS = Claims()


def process_claims() -> Claims:
    """This process's one :class:`Claims` (the module docstring says who may ask for it)."""
    return _PROCESS_CLAIMS
