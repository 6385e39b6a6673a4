"""torchboost: make PyTorch training on your own machine markedly faster, and prove it.

Public names::

    torchboost.Booster       the runtime for your own training loop
    torchboost.BoostConfig   what may change, read from torchboost.toml
    torchboost.ConfigError   a bad configuration value, naming the field
    torchboost.Overlay       some fields of some sections: a candidate's changes
    torchboost.probe()       what this machine can do
"""

from torchboost.booster import Booster, load_config
from torchboost.checkpoint import CheckpointError
from torchboost.config import BoostConfig, ConfigError, Overlay
from torchboost.env import Environment, probe
from torchboost.techniques.registry import techniques as _techniques

_techniques()  # load every technique module, so each registers its torchboost.toml section

__version__ = "0.1.0"

__all__ = [
    "BoostConfig",
    "Booster",
    "CheckpointError",
    "ConfigError",
    "Overlay",
    "Environment",
    "load_config",
    "probe",
    "__version__",
]
