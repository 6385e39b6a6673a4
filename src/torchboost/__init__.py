"""torchboost: make PyTorch training on your own machine markedly faster, and prove it.

Public names::

    torchboost.Booster       the runtime for your own training loop
    torchboost.BoostConfig   what may change, read from torchboost.toml
    torchboost.ConfigError   a bad configuration value, naming the field
    torchboost.Overlay       some fields of some sections: a candidate's changes
    torchboost.probe()       what this machine can do
    torchboost.doctor(fn)    the doctor on a training loop in this process (a notebook)
"""

from __future__ import annotations

import importlib
from typing import Any

from torchboost._version import __version__
from torchboost.config import BoostConfig, ConfigError, Overlay
from torchboost.env import Environment, probe
from torchboost.techniques.registry import techniques as _techniques

_techniques()  # load every technique module, so each registers its torchboost.toml section

# The runtime is imported on first use (PEP 562), not here: a module that only needs the
# version or the configuration (the reports, the observed child) then does not import the
# Booster with its checkpointing and distributed code.
_LAZY = {"Booster": "torchboost.booster", "load_config": "torchboost.booster",
         "CheckpointError": "torchboost.checkpoint", "doctor": "torchboost.notebook",
         "DoctorReport": "torchboost.notebook"}


def __getattr__(name: str) -> Any:
    """``torchboost.Booster`` and the other runtime names, imported when first asked for."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchboost' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    """The module's names, the lazy ones included."""
    return sorted({*globals(), *_LAZY})


__all__ = [
    "BoostConfig",
    "Booster",
    "CheckpointError",
    "ConfigError",
    "DoctorReport",
    "Overlay",
    "Environment",
    "doctor",
    "load_config",
    "probe",
    "__version__",
]
