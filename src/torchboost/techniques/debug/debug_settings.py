"""The ``[debug]`` section of ``torchboost.toml`` (the technique is :mod:`torchboost.techniques.debug`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torchboost.config import AUTO, KEEP, BoolOrWord, ConfigError, check_bool_or_word

__all__ = ["DebugConfig"]


@dataclass(frozen=True, kw_only=True)
class DebugConfig:
    """Debugging switches a script left on, turned off where the file says so."""

    section: ClassVar[str] = "debug"

    detect_anomaly: BoolOrWord = AUTO
    """auto (as the script leaves it) | keep | false: autograd's anomaly detection
    (``torch.autograd.set_detect_anomaly``), turned off after the script's set-up (by the
    Booster's prepare, or at the first optimizer step from outside). Only ever written by
    the user or by tune: nothing the script set is changed unless this says so."""

    def __post_init__(self) -> None:
        check_bool_or_word("debug.detect_anomaly", self.detect_anomaly, (AUTO, KEEP))
        if self.detect_anomaly is True:
            raise ConfigError("debug.detect_anomaly: true is not a setting: torchboost only turns anomaly detection "
                              "off (false); to look for a NaN's origin, torch.autograd.set_detect_anomaly(True) in "
                              "the script for that one run")

    @classmethod
    def off(cls) -> "DebugConfig":
        """Anomaly detection as the script left it."""
        return cls(detect_anomaly=KEEP)
