"""Resolve "auto": turn a BoostConfig into concrete choices for this machine, model and loader.

Each technique owns its own rule (its descriptor's ``resolve``); this module asks each in
the registry's order, on the configuration resolved so far, and collects the answers
with their reasons, so the choice made and the why are one printable, saveable object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchboost.config import BoostConfig
from torchboost.env import Environment
from torchboost.techniques.registry import ResolveContext, techniques

__all__ = ["ResolvedConfig", "resolve"]


@dataclass(frozen=True)
class ResolvedConfig:
    """The concrete choices for one prepared run, and the reason for each.

    ``config`` holds no "auto": every field holds the value applied, or "keep" where
    the user's own setting stays. ``reasons`` is keyed by dotted field name.
    """

    config: BoostConfig
    reasons: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    """Each technique's resolved detail for its ``apply`` (e.g. the loader's settings), by name."""

    def rows(self) -> list[tuple[str, str, str]]:
        """(field, value, reason) for every field, in config order."""
        out = []
        for section, values in self.config.to_dict().items():
            for key, value in values.items():
                name = f"{section}.{key}"
                shown = str(value).lower() if isinstance(value, bool) else str(value)
                out.append((name, shown, self.reasons.get(name, "as configured")))
        return out

    def summary(self) -> str:
        """The resolved configuration as aligned text, one field a line with its reason."""
        rows = self.rows()
        width_name = max(len(r[0]) for r in rows)
        width_value = max(len(r[1]) for r in rows)
        lines = ["torchboost resolved configuration:"]
        lines += [f"  {n:<{width_name}}  {v:<{width_value}}  {why}" for n, v, why in rows]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: {"config": {...}, "reasons": {...}}."""
        return {"config": self.config.to_dict(), "reasons": dict(self.reasons)}

    def to_toml(self, path: str | Path) -> None:
        """Write the concrete config as a torchboost.toml, reasons as leading comments."""
        header = "Resolved by torchboost; each line: field = value: reason\n" + "\n".join(
            f"{n} = {v}: {why}" for n, v, why in self.rows()
        )
        self.config.to_toml(path, header=header)


def resolve(
    config: BoostConfig,
    env: Environment,
    *,
    device: torch.device,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    loader: Any = None,
) -> ResolvedConfig:
    """Resolve every "auto" in ``config`` for this environment, model, optimizer and loader."""
    ctx = ResolveContext(env=env, device=device, model=model, optimizer=optimizer, loader=loader, config=config)
    reasons: dict[str, str] = {}
    details: dict[str, Any] = {}
    for technique in techniques():
        if technique.resolve is None:
            continue
        resolution = technique.resolve(ctx)
        ctx.config = resolution.values.on(ctx.config)
        reasons.update(resolution.reasons)
        details[technique.name] = resolution.detail
    return ResolvedConfig(config=ctx.config, reasons=reasons, details=details)
