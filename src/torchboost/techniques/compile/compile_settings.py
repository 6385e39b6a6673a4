"""The ``[compile]`` section of ``torchboost.toml`` (the technique is :mod:`torchboost.techniques.compile`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torchboost.config import check_choice

__all__ = ["CompileConfig"]


@dataclass(frozen=True, kw_only=True)
class CompileConfig:
    """torch.compile of the model."""

    section: ClassVar[str] = "compile"
    MODES: ClassVar[tuple[str, ...]] = ("off", "default", "reduce-overhead", "max-autotune")
    SCOPES: ClassVar[tuple[str, ...]] = ("model", "regional")

    mode: str = "off"
    """off | default | reduce-overhead | max-autotune (torch.compile's ``mode``)."""
    scope: str = "model"
    """model (compile the whole model) | regional (compile each block of a repeated
    ModuleList/Sequential; shorter compile, falls back to the whole model)."""

    def __post_init__(self) -> None:
        check_choice("compile.mode", self.mode, self.MODES)
        check_choice("compile.scope", self.scope, self.SCOPES)

    @classmethod
    def off(cls) -> "CompileConfig":
        """No compile: plain PyTorch."""
        return cls(mode="off")
