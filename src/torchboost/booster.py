"""The Booster: a few lines in the user's own loop apply every technique, correctly.

::

    booster = torchboost.Booster()          # ./torchboost.toml when present, else defaults
    model, optimizer, loader = booster.prepare(model, optimizer, loader)
    for x, y in loader:                     # batches arrive on booster.device
        with booster.autocast():
            loss = criterion(model(x), y)
        booster.backward(loss)
        optimizer.step()                    # unscale / skip on overflow / update scale
        optimizer.zero_grad()

The Booster composes the technique modules (``torchboost.techniques``) and owns no
technique logic. Techniques switched off are null objects chosen in ``prepare``, so the
step code has no per-technique branch; ``BoostConfig.off()`` gives plain PyTorch.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchboost.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torchboost.config import CONFIG_FILENAME, BoostConfig, ConfigError
from torchboost.env import Environment, probe
from torchboost.prepared import BoostedOptimizer, BoostedScheduler
from torchboost.resolve import ResolvedConfig, resolve
from torchboost.techniques.compile import CompileStats, apply_compile
from torchboost.techniques.cpu import apply_threads
from torchboost.techniques.loader import DeviceLoader, rebuild_loader
from torchboost.techniques.memory import apply_channels_last, to_channels_last
from torchboost.techniques.optimizer import apply_optimizer_implementation
from torchboost.techniques.precision import Precision, make_precision

__all__ = ["Booster", "load_config"]

_CHECKPOINT_FORMAT = 1


def load_config(config: BoostConfig | str | Path | dict | None) -> BoostConfig:
    """A BoostConfig from an object, a TOML path, a dict, or None (./torchboost.toml or defaults)."""
    if isinstance(config, BoostConfig):
        return config
    if isinstance(config, dict):
        return BoostConfig.from_dict(config)
    if isinstance(config, (str, Path)):
        return BoostConfig.from_toml(config)
    if config is None:
        default = Path(CONFIG_FILENAME)
        return BoostConfig.from_toml(default) if default.is_file() else BoostConfig()
    raise ConfigError(f"config: expected a BoostConfig, a dict, a path or None; got {type(config).__name__}")


def _default_device(env: Environment) -> torch.device:
    if env.device == "cuda":
        return torch.device("cuda", int(env.dist_env.get("LOCAL_RANK", "0")))
    return torch.device(env.device)


class _Unprepared:
    """Stands in for the precision policy until ``prepare`` runs, with a clear error."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("Booster.prepare(model, optimizer, ...) must be called first")


class Booster:
    """Applies the configured techniques to a model, optimizer, DataLoader and scheduler.

    Args:
        config: a :class:`BoostConfig`, a path to a TOML file, a dict of sections, or
            None to read ``./torchboost.toml`` when present (else every default).
        device: where the model trains; None picks CUDA (this process's LOCAL_RANK), then
            MPS, then CPU.
        verbose: print the resolved configuration with reasons to stderr at ``prepare``.
    """

    def __init__(
        self,
        config: BoostConfig | str | Path | dict | None = None,
        *,
        device: str | torch.device | None = None,
        verbose: bool = True,
    ):
        self.config = load_config(config)
        self.env = probe()
        self.device = torch.device(device) if device is not None else _default_device(self.env)
        self.verbose = verbose
        self.resolved: ResolvedConfig | None = None
        """The concrete choices made by ``prepare``, with reasons."""
        self.compile_stats: CompileStats | None = None
        """How compilation went (first-call seconds, fallback), after ``prepare``."""
        self._precision: Precision | _Unprepared = _Unprepared()
        self._optimizer: BoostedOptimizer | None = None

    # -- setting up -------------------------------------------------------------------

    def prepare(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        loader: Any = None,
        scheduler: Any = None,
    ) -> tuple[Any, ...]:
        """Apply every technique; returns ``(model, optimizer[, loader][, scheduler])``.

        The loader and scheduler are in the result only when given. The model is the
        same object, moved and possibly compiled in place; the optimizer, loader and
        scheduler are wrappers to use instead of the originals.
        """
        if not isinstance(model, nn.Module):
            raise TypeError(f"prepare: model must be a torch.nn.Module; got {type(model).__name__}")
        resolved = resolve(
            self.config, self.env, device=self.device, model=model, optimizer=optimizer, loader=loader
        )
        cfg = resolved.config
        self.resolved = resolved

        # The order matters, and is written once here:
        # 1. process-wide switches first (threads, TF32), so everything after runs under them;
        apply_threads(resolved.threads)
        self._precision = make_precision(cfg.precision.mode, self.device.type)
        self._precision.setup()
        # 2. the model to its device and memory format before the optimizer is rebuilt
        #    (fused kernels need parameters on the device) and before compile (Inductor
        #    specialises on device and layout);
        model.to(self.device)
        batch_transform = None
        if cfg.memory.channels_last:
            apply_channels_last(model)
            batch_transform = to_channels_last
        # 3. compile last on the model, so it traces the final layout.
        self.compile_stats = apply_compile(model, mode=cfg.compile.mode, scope=cfg.compile.scope)

        results: list[Any] = [model]
        if optimizer is not None:
            inner = apply_optimizer_implementation(optimizer, cfg.optimizer.implementation)
            if scheduler is not None and inner is not optimizer:
                scheduler.optimizer = inner  # the schedule must drive the rebuilt optimizer
            self._optimizer = BoostedOptimizer(inner, self._precision.step)
            results.append(self._optimizer)
        elif scheduler is not None:
            raise ValueError("prepare: a scheduler needs its optimizer passed too")
        else:
            results.append(None)
        if loader is not None:
            rebuilt = rebuild_loader(loader, resolved.loader) if resolved.loader is not None else loader
            pinned = bool(getattr(rebuilt, "pin_memory", False))
            results.append(
                DeviceLoader(rebuilt, self.device, non_blocking=pinned, transform=batch_transform)
            )
        if scheduler is not None:
            results.append(BoostedScheduler(scheduler, self._optimizer))
        if self.verbose and self.is_main_process:
            print(resolved.summary(), file=sys.stderr)
        return tuple(results)

    # -- the training step ------------------------------------------------------------

    def autocast(self) -> AbstractContextManager:
        """Context for forward and loss: autocast in bf16/fp16 modes, nothing otherwise."""
        return self._precision.autocast()

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, scaled in fp16 mode. Keyword args go to ``backward``."""
        self._precision.backward(loss, **kwargs)

    def unscale_(self, optimizer: BoostedOptimizer | None = None) -> None:
        """Unscale gradients in place before clipping them (fp16); a no-op otherwise."""
        target = optimizer if optimizer is not None else self._optimizer
        if target is None:
            raise RuntimeError("unscale_: no optimizer was prepared")
        inner = target.optimizer if isinstance(target, BoostedOptimizer) else target
        self._precision.unscale_(inner)

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``optimizer.step()`` was skipped for fp16 overflow."""
        return bool(self._optimizer and self._optimizer.step_was_skipped)

    @property
    def is_main_process(self) -> bool:
        """Rank 0 (or not distributed): the process that prints and saves."""
        return self.env.dist_env.get("RANK", "0") == "0"

    def summary(self) -> str:
        """The resolved configuration and the reason for each choice, as text."""
        if self.resolved is None:
            return "torchboost: not prepared yet; configured:\n" + self.config.to_toml_string()
        return self.resolved.summary()

    # -- checkpoints ------------------------------------------------------------------

    def save(
        self,
        path: str | Path,
        *,
        model: nn.Module | None = None,
        optimizer: Any = None,
        scheduler: Any = None,
        **extra: Any,
    ) -> None:
        """Write a checkpoint atomically: model, optimizer, scheduler, scaler, ``extra``.

        ``extra`` values must be tensors or plain containers of numbers and strings (they
        are read back with ``weights_only=True``).
        """
        state: dict[str, Any] = {"format": _CHECKPOINT_FORMAT, "extra": extra}
        if model is not None:
            state["model"] = model.state_dict()
        if optimizer is not None:
            state["optimizer"] = optimizer.state_dict()
        if scheduler is not None:
            state["scheduler"] = scheduler.state_dict()
        if not isinstance(self._precision, _Unprepared):
            state["precision"] = self._precision.state_dict()
        if self._optimizer is not None:
            state["steps"] = {
                "real": self._optimizer.real_steps,
                "skipped": self._optimizer.skipped_steps,
            }
        if self.resolved is not None:
            state["resolved"] = self.resolved.to_dict()
        if self.is_main_process:
            save_checkpoint(path, state)

    def load(
        self,
        path: str | Path,
        *,
        model: nn.Module | None = None,
        optimizer: Any = None,
        scheduler: Any = None,
    ) -> dict[str, Any]:
        """Restore what ``save`` wrote into the given objects; returns the ``extra`` dict.

        Refuses (``CheckpointError``) a file that holds anything that would run code.
        """
        state = load_checkpoint(path, map_location=self.device)
        wanted = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
        for key, target in wanted.items():
            if target is None:
                continue
            if key not in state:
                raise CheckpointError(f"{path}: holds no {key} state")
            target.load_state_dict(state[key])
        if "precision" in state and not isinstance(self._precision, _Unprepared):
            self._precision.load_state_dict(state["precision"])
        if "steps" in state and self._optimizer is not None:
            self._optimizer.__dict__["real_steps"] = int(state["steps"]["real"])
            self._optimizer.__dict__["skipped_steps"] = int(state["steps"]["skipped"])
        if isinstance(scheduler, BoostedScheduler):
            scheduler.sync()
        return dict(state.get("extra", {}))
