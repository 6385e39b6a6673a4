"""The Booster: a few lines in the user's own loop apply every technique, correctly.

::

    booster = torchboost.Booster()          # ./torchboost.toml when present, else defaults
    model, optimizer, loader = booster.prepare(model, optimizer, loader)
    for x, y in loader:                     # batches arrive on booster.device
        with booster.accumulate(model):     # no_sync + a real step only at a window's end
            with booster.autocast():
                loss = criterion(model(x), y)
            booster.backward(loss)          # or backward(loss_sum, num_items=n_tokens)
            optimizer.step()                # unscale / skip on overflow / update scale
            optimizer.zero_grad()

Or ``booster.train_step(batch, compute_loss)``: one optimizer step on a batch split into
micro-batches that fit memory. Under ``torchrun`` the same script runs with DDP.

The Booster composes the technique modules (``torchboost.techniques``) and owns no
technique logic. Techniques switched off are null objects chosen in ``prepare``, so the
step code has no per-technique branch; ``BoostConfig.off()`` gives plain PyTorch.
"""

from __future__ import annotations

import functools
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchboost.checkpoint import CheckpointError, ResumableLoader, load_checkpoint, save_checkpoint
from torchboost.config import CONFIG_FILENAME, BoostConfig, ConfigError
from torchboost.env import Environment, probe
from torchboost.prepared import BoostedOptimizer, BoostedScheduler
from torchboost.resolve import ResolvedConfig, resolve
from torchboost.trial import mark_booster_prepared, overlay, trial_settings
from torchboost.techniques.accumulation import Accumulator
from torchboost.techniques.microbatch import MicroBatcher
from torchboost.techniques.compile import CompileStats, apply_compile
from torchboost.techniques.cpu import apply_threads
from torchboost.techniques.distributed import SingleProcess, make_distributed, unwrap_model
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
        trial = trial_settings()
        if trial is not None:
            # A `torchboost tune` trial (see torchboost.trial): the candidate on top of
            # plain PyTorch, exactly what tune writes to torchboost.toml if it wins.
            self.config = overlay(BoostConfig.off(), trial)
        self.env = probe()
        self.device = torch.device(device) if device is not None else _default_device(self.env)
        self.verbose = verbose
        self.resolved: ResolvedConfig | None = None
        """The concrete choices made by ``prepare``, with reasons."""
        self.compile_stats: CompileStats | None = None
        """How compilation went (first-call seconds, fallback), after ``prepare``."""
        self._precision: Precision | _Unprepared = _Unprepared()
        self._accumulator: Accumulator | _Unprepared = _Unprepared()
        self._optimizer: BoostedOptimizer | None = None
        self._loader: ResumableLoader | None = None
        self._model: nn.Module | None = None
        self._dist: SingleProcess | None = None
        self.micro_batcher: MicroBatcher | None = None
        """Runs ``train_step``; ``.size`` is the current micro-batch size (None: whole
        batch), ``.simulate_oom_from`` a test hook. Set by ``prepare``."""

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
        same object, moved and possibly compiled in place (wrapped in
        DistributedDataParallel under torchrun); the optimizer, loader and scheduler are
        wrappers to use instead of the originals. Under torchrun (WORLD_SIZE > 1) the
        process group is initialised here and the loader gets a DistributedSampler.
        """
        if not isinstance(model, nn.Module):
            raise TypeError(f"prepare: model must be a torch.nn.Module; got {type(model).__name__}")
        mark_booster_prepared()  # no-code application (tune trials, `torchboost run`) stands down
        self._dist = make_distributed(self.env, self.device)  # first: later steps may communicate
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
        # 3. compile on the model, so it traces the final layout;
        self.compile_stats = apply_compile(model, mode=cfg.compile.mode, scope=cfg.compile.scope)
        # 4. DDP last: it wraps the compiled module and all-reduces its gradients.
        model = self._dist.wrap_model(model)
        self._model = model

        prepared_loader = None
        if loader is not None:
            # Shard first, so the rebuilt loader keeps the DistributedSampler.
            sharded = self._dist.shard_loader(loader)
            rebuilt = rebuild_loader(sharded, resolved.loader) if resolved.loader is not None else sharded
            pinned = bool(getattr(rebuilt, "pin_memory", False))
            self._loader = prepared_loader = ResumableLoader(
                DeviceLoader(rebuilt, self.device, non_blocking=pinned, transform=batch_transform)
            )
        batch_size = getattr(loader, "batch_size", None)
        self._accumulator = Accumulator(
            resolved.accumulation.steps,
            position=prepared_loader,
            unit=batch_size if isinstance(batch_size, int) else 1,
            reduce_sum=self._dist.reduce_sum,
            world_size=self._dist.world_size,
            device=self.device,
        )
        micro = resolved.accumulation.micro_batch_size
        self.micro_batcher = MicroBatcher(micro if isinstance(micro, int) else None)

        results: list[Any] = [model]
        if optimizer is not None:
            inner = apply_optimizer_implementation(optimizer, cfg.optimizer.implementation)
            if scheduler is not None and inner is not optimizer:
                scheduler.optimizer = inner  # the schedule must drive the rebuilt optimizer
            self._accumulator.optimizer = inner
            step = functools.partial(self._accumulator.step, step_fn=self._precision.step)
            self._optimizer = BoostedOptimizer(inner, step, self._accumulator.zero_grad)
            results.append(self._optimizer)
        elif scheduler is not None:
            raise ValueError("prepare: a scheduler needs its optimizer passed too")
        else:
            results.append(None)
        if prepared_loader is not None:
            results.append(prepared_loader)
        if scheduler is not None:
            results.append(BoostedScheduler(scheduler, self._optimizer))
        if self.verbose and self.is_main_process:
            print(resolved.summary(), file=sys.stderr)
        return tuple(results)

    # -- the training step ------------------------------------------------------------

    def autocast(self) -> AbstractContextManager:
        """Context for forward and loss: autocast in bf16/fp16 modes, nothing otherwise."""
        return self._precision.autocast()

    def accumulate(self, model: nn.Module | None = None, *, num_samples: int | None = None) -> AbstractContextManager:
        """Context for one micro-step (forward, backward, ``optimizer.step()``, ``zero_grad()``).

        With ``accumulation.steps = K`` the optimizer really steps on every K-th micro-step
        and on the loader's last batch; before that, ``step`` and ``zero_grad`` do nothing
        and a DDP ``model`` skips its all-reduce (``no_sync``). ``num_samples``: samples in
        this micro-batch, when it does not come from the prepared loader.
        """
        return self._accumulator.micro_step(model if model is not None else self._model, num_samples=num_samples)

    def backward(self, loss: torch.Tensor, *, num_items: int | float | torch.Tensor | None = None, **kwargs: Any) -> None:
        """``loss.backward()``, scaled in fp16 mode, weighted for accumulation.

        ``loss`` is a mean over the micro-batch; or, with ``num_items``, a sum over that
        many items (e.g. non-padding tokens), and the step then uses the window's sum
        divided by its total item count. Other keyword args go to ``backward``.
        """
        self._accumulator.backward(loss, self._precision.backward, num_items=num_items, **kwargs)

    def train_step(self, batch: Any, compute_loss: Any) -> torch.Tensor:
        """One optimizer step on ``batch``, in micro-batches that fit memory.

        ``compute_loss(micro_batch)`` returns the micro-batch's mean loss, or
        ``(loss_sum, num_items)``; it runs under the configured precision. A micro-batch
        that runs out of memory halves the micro-batch size and re-runs the batch from its
        start (no step lost). Steps and zeroes the prepared optimizer; returns the batch's
        loss, detached.
        """
        if self._optimizer is None or self.micro_batcher is None:
            raise RuntimeError("train_step: call Booster.prepare(model, optimizer, ...) first")
        return self.micro_batcher.run(
            batch,
            compute_loss,
            model=self._model,
            optimizer=self._optimizer,
            accumulator=self._accumulator,
            autocast=self.autocast,
            backward=self.backward,
        )

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
        if self._dist is not None:
            return self._dist.rank == 0
        return self.env.dist_env.get("RANK", "0") == "0"

    @property
    def at_window_boundary(self) -> bool:
        """No accumulation window is open: the last micro-step stepped (a checkpoint may be taken)."""
        return isinstance(self._accumulator, _Unprepared) or self._accumulator.at_boundary

    @property
    def world_size(self) -> int:
        """Training processes (1 unless launched by torchrun with several)."""
        return self._dist.world_size if self._dist is not None else 1

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
        are read back with ``weights_only=True``). The prepared loader's position and the
        RNG states are saved too, so ``load`` resumes mid-epoch. Call it at an accumulation
        window's end (after ``optimizer.step()``); only rank 0 writes.
        """
        if not self.at_window_boundary:
            raise CheckpointError(
                "save: an accumulation window is open (its gradients are not in a checkpoint); "
                "save after optimizer.step() at the window's end"
            )
        state: dict[str, Any] = {"format": _CHECKPOINT_FORMAT, "extra": extra}
        if self._loader is not None:
            state["loader"] = self._loader.state_dict()
        if model is not None:
            state["model"] = unwrap_model(model).state_dict()
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

        The prepared loader resumes at the saved position on its next pass. Refuses
        (``CheckpointError``) a file that holds anything that would run code.
        """
        state = load_checkpoint(path, map_location=self.device)
        model = unwrap_model(model) if model is not None else None
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
        if "loader" in state and self._loader is not None:
            self._loader.load_state_dict(state["loader"])
        return dict(state.get("extra", {}))
