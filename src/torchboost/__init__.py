"""torchboost: make PyTorch training on your own machine markedly faster, and prove it.

Public names::

    torchboost.Booster       the runtime for your own training loop
    torchboost.BoostConfig   what may change, read from torchboost.toml
    torchboost.ConfigError   a bad configuration value, naming the field
    torchboost.probe()       what this machine can do
"""

from torchboost.config import BoostConfig, ConfigError
from torchboost.env import Environment, probe

__version__ = "0.1.0"

__all__ = ["BoostConfig", "ConfigError", "Environment", "probe", "__version__"]
