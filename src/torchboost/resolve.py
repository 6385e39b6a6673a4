"""Resolve "auto": turn a BoostConfig into concrete choices for this machine, model and loader.

Each technique module owns its own rule (``resolve_*``); this module only asks each in
turn and collects the answers with their reasons, so the choice made and the why are
one printable, saveable object.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchboost.config import BoostConfig
from torchboost.env import Environment
from torchboost.techniques.accumulation import ResolvedAccumulation, resolve_accumulation
from torchboost.techniques.compile import resolve_compile
from torchboost.techniques.loader import LOADER_FIELDS, LoaderSettings, resolve_host
from torchboost.techniques.memory import resolve_channels_last
from torchboost.techniques.optimizer import resolve_optimizer
from torchboost.techniques.precision import resolve_precision

__all__ = ["ResolvedConfig", "resolve"]


@dataclass(frozen=True)
class ResolvedConfig:
    """The concrete choices for one prepared run, and the reason for each.

    ``config`` holds no "auto": loader fields hold the values the rebuilt loader uses
    (or "keep" when there is no loader), ``cpu.threads`` the intra-op thread count.
    ``reasons`` is keyed by dotted field name ("precision.mode").
    """

    config: BoostConfig
    reasons: dict[str, str] = field(default_factory=dict)
    loader: LoaderSettings | None = None
    threads: int | None = None
    """Intra-op threads to set, None to leave as is."""
    accumulation: ResolvedAccumulation | None = None
    """Micro-steps per optimizer step and the micro-batch size for ``train_step``."""

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
    reasons: dict[str, str] = {}

    precision_mode, reasons["precision.mode"] = resolve_precision(config.precision.mode, env)
    compile_cfg, reasons["compile.mode"] = resolve_compile(config.compile, env)

    settings, threads, host_reasons = resolve_host(config.loader, config.cpu, loader, env, device=device)
    reasons.update(host_reasons)

    if optimizer is None:
        implementation = "default"
        reasons["optimizer.implementation"] = "no optimizer given"
    else:
        implementation, reasons["optimizer.implementation"] = resolve_optimizer(
            config.optimizer.implementation, optimizer, device=device
        )

    batch_size = getattr(loader, "batch_size", None)
    accumulation = resolve_accumulation(
        config.accumulation,
        batch_size=batch_size if isinstance(batch_size, int) else None,
        world_size=max(1, int(env.dist_env.get("WORLD_SIZE", "1"))),
    )
    reasons.update(accumulation.reasons)

    channels_last, reasons["memory.channels_last"] = resolve_channels_last(
        config.memory.channels_last, model, device=device, precision_mode=precision_mode
    )

    loader_values = (
        dataclasses.asdict(settings)
        if settings is not None
        else {k: "keep" for k in LOADER_FIELDS}
    )
    for key in ("prefetch_factor", "sharing_strategy"):
        if loader_values.get(key) is None:
            loader_values[key] = "keep"
    concrete = config.replace(
        precision={"mode": precision_mode},
        compile={"mode": compile_cfg.mode, "scope": compile_cfg.scope},
        loader=loader_values,
        optimizer={"implementation": implementation},
        memory={"channels_last": channels_last},
        cpu={"threads": threads if threads is not None else "keep"},
        accumulation={
            "steps": accumulation.steps,
            "effective_batch_size": accumulation.effective_batch_size,
            "micro_batch_size": accumulation.micro_batch_size,
        },
    )
    return ResolvedConfig(
        config=concrete, reasons=reasons, loader=settings, threads=threads, accumulation=accumulation
    )
