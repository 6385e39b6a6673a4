"""The optimizer's section of the configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torchboost.config import AUTO, check_choice

__all__ = ["OptimizerConfig"]


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """Optimizer implementation."""

    section: ClassVar[str] = "optimizer"
    IMPLEMENTATIONS: ClassVar[tuple[str, ...]] = ("auto", "default", "foreach", "fused")

    implementation: str = AUTO
    """auto | default (leave the optimizer as built) | foreach | fused."""

    def __post_init__(self) -> None:
        check_choice("optimizer.implementation", self.implementation, self.IMPLEMENTATIONS)

    @classmethod
    def off(cls) -> "OptimizerConfig":
        """The optimizer as the script built it."""
        return cls(implementation="default")
