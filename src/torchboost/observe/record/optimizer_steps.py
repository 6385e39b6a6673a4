"""Every optimizer the script steps, and how often: a GAN's second optimizer is seen too.

The step boundary is the first optimizer's step (the primary,
:class:`~torchboost.observe.record.script_objects.ScriptObjects`); a script with two (a GAN's
generator and discriminator, a second one stepped every fifth step) has the other's
steps counted here, so the report can say it was there and how often it stepped.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

__all__ = ["OptimizerSteps"]


class OptimizerSteps:
    """Outermost ``step()`` calls per optimizer, in the order each first stepped."""

    def __init__(self, stepping: Callable[[torch.optim.Optimizer], str | None] = lambda _: None) -> None:
        self._stepping = stepping  # what an optimizer steps, in words: asked once, at its first step
        self._refs: list[weakref.ref] = []
        self._names: list[str] = []
        self._owners: list[str | None] = []
        self._steps: list[int] = []
        self._primary: list[bool] = []

    def count(self, optimizer: torch.optim.Optimizer, primary: bool) -> None:
        """``optimizer`` has stepped once more (a scan of one or two entries); ``primary``:
        its steps are the training steps. Noted now: by the run's end the script's
        objects may be gone."""
        for i, ref in enumerate(self._refs):
            if ref() is optimizer:
                self._steps[i] += 1
                self._primary[i] = primary
                return
        self._refs.append(weakref.ref(optimizer))
        self._names.append(type(optimizer).__name__)
        try:
            self._owners.append(self._stepping(optimizer))
        except Exception:  # noqa: BLE001 - a name is not worth breaking the user's run
            self._owners.append(None)
        self._steps.append(1)
        self._primary.append(primary)

    def facts(self) -> list[dict[str, Any]]:
        """``{"class_name", "stepping", "steps", "primary"}`` per optimizer, for
        :attr:`~torchboost.evidence.observed.Facts.optimizers`."""
        return [{"class_name": name, "stepping": owner, "steps": steps, "primary": primary}
                for name, owner, steps, primary in zip(self._names, self._owners, self._steps, self._primary)]
