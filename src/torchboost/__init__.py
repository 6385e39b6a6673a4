"""torchboost: make PyTorch training on your own machine markedly faster, and prove it.

Public names::

    torchboost.Booster       the runtime for your own training loop
    torchboost.BoostConfig   what may change, read from torchboost.toml
    torchboost.ConfigError   a bad configuration value, naming the field
    torchboost.probe()       what this machine can do
"""

from torchboost.booster import Booster, load_config
from torchboost.checkpoint import CheckpointError
from torchboost.config import BoostConfig, ConfigError
from torchboost.env import Environment, probe

__version__ = "0.1.0"

__all__ = [
    "BoostConfig",
    "Booster",
    "CheckpointError",
    "ConfigError",
    "Environment",
    "load_config",
    "probe",
    "__version__",
]
