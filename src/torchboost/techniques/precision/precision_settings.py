"""The ``[precision]`` section of ``torchboost.toml`` (the technique is :mod:`torchboost.techniques.precision`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torchboost.config import AUTO, check_choice

__all__ = ["PrecisionConfig"]


@dataclass(frozen=True, kw_only=True)
class PrecisionConfig:
    """Numeric precision of forward and backward."""

    section: ClassVar[str] = "precision"
    MODES: ClassVar[tuple[str, ...]] = ("auto", "fp32", "tf32", "bf16", "fp16")

    mode: str = AUTO
    """auto | fp32 (no change) | tf32 (matmul precision "high") | bf16 autocast |
    fp16 autocast with a GradScaler."""

    def __post_init__(self) -> None:
        check_choice("precision.mode", self.mode, self.MODES)

    @classmethod
    def off(cls) -> "PrecisionConfig":
        """fp32: plain PyTorch."""
        return cls(mode="fp32")
