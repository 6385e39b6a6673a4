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
technique logic: ``prepare`` runs each registered technique's ``apply`` in the
registry's order. Techniques switched off are null objects chosen there, so the step
code has no per-technique branch; ``BoostConfig.off()`` gives plain PyTorch. The step
itself (accumulate, autocast, backward, ``optimizer.step()``, ``zero_grad()``) reads top
to bottom in :mod:`torchboost.step`; the Booster's methods hand each call to it.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchboost import handover
from torchboost.checkpoint import CheckpointError, booster_state, load_checkpoint, restore_booster_state
from torchboost.checkpoint import save_checkpoint
from torchboost.config import BoostConfig, ConfigError
from torchboost.config_files import find_config
from torchboost.env import Environment, probe
from torchboost.prepared import BoostedOptimizer, BoostedScheduler
from torchboost.resolve import ResolvedConfig, resolve
from torchboost.step import TrainStep
from torchboost.techniques.microbatch import MicroBatcher
from torchboost.techniques.registry import Preparation, Technique, techniques

__all__ = ["Booster", "load_config"]


def load_config(config: BoostConfig | str | Path | dict | None) -> BoostConfig:
    """A BoostConfig from an object, a TOML path, a dict, or None (./torchboost.toml, or
    ./pyproject.toml's ``[tool.torchboost]``, else defaults; both is a ConfigError)."""
    if isinstance(config, BoostConfig):
        return config
    if isinstance(config, dict):
        return BoostConfig.from_dict(config)
    if isinstance(config, (str, Path)):
        return BoostConfig.from_toml(config)
    if config is None:
        found = find_config(Path.cwd())
        return BoostConfig.from_toml(found) if found is not None else BoostConfig()
    raise ConfigError(f"config: expected a BoostConfig, a dict, a path or None; got {type(config).__name__}")


def _default_device(env: Environment) -> torch.device:
    if env.device == "cuda":
        return torch.device("cuda", env.local_rank)
    return torch.device(env.device)


class _Unprepared:
    """Stands in for the precision policy and the training step until ``prepare`` runs."""

    at_boundary = True

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("Booster.prepare(model, optimizer, ...) must be called first")


_UNPREPARED = _Unprepared()


def _loss_levers(registry: list[Technique], prep: Preparation, criterion: Any) -> Any:
    """``criterion`` through each technique's loss-level lever (``Technique.loss``), in order."""
    for technique in registry:
        if technique.loss is not None:
            criterion = technique.loss(prep, criterion)
    return criterion


class Booster:
    """Applies the configured techniques to a model, optimizer, DataLoader and scheduler.

    Args:
        config: a :class:`BoostConfig`, a path to a TOML file, a dict of sections, or
            None to read ``./torchboost.toml`` when present, or ``[tool.torchboost]`` in
            ``./pyproject.toml`` (else every default).
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
        trial = handover.trial_plan()
        if trial is not None:
            # A `torchboost tune` trial (see torchboost.handover): the candidate on top of
            # the user's configuration, exactly what tune writes to torchboost.toml if it wins.
            self.config = trial.config
        self.env = probe()
        # The script builds the Booster with no torchboost argument to carry the claims,
        # so it takes this process's one (torchboost.handover says why and who else sees it).
        self._claims = handover.process_claims()
        self.device = torch.device(device) if device is not None else _default_device(self.env)
        self.verbose = verbose
        self.resolved: ResolvedConfig | None = None
        """The concrete choices made by ``prepare``, with reasons."""
        self._prep: Preparation | None = None
        self._step: TrainStep | _Unprepared = _UNPREPARED
        """The training step (:class:`torchboost.step.TrainStep`), after ``prepare``."""
        self._micro_batcher: MicroBatcher | None = None

    # -- setting up -------------------------------------------------------------------

    def prepare(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        loader: Any = None,
        scheduler: Any = None,
        *,
        criterion: Any = None,
    ) -> tuple[Any, ...]:
        """Apply every technique; returns ``(model, optimizer[, loader][, scheduler][, criterion])``.

        The loader, scheduler and ``criterion`` (the loss function) are in the result only
        when given; the criterion comes back through any loss-level lever. The model is the
        same object, moved and possibly compiled in place (wrapped in
        DistributedDataParallel under torchrun); the optimizer, loader and scheduler are
        wrappers to use instead of the originals. Under torchrun (WORLD_SIZE > 1) the
        process group is initialised here and the loader gets a DistributedSampler.
        """
        if not isinstance(model, nn.Module):
            raise TypeError(f"prepare: model must be a torch.nn.Module; got {type(model).__name__}")
        if scheduler is not None and optimizer is None:
            raise ValueError("prepare: a scheduler needs its optimizer passed too")
        registry = techniques()
        self._claims.claim(t.name for t in registry if t.apply is not None)  # no-code appliers stand down
        prep = Preparation(env=self.env, device=self.device, config=self.config, details={}, model=model,
                           optimizer=optimizer, loader=loader, scheduler=scheduler)
        for technique in registry:
            if technique.setup is not None:
                technique.setup(prep)
        self.resolved = resolve(self.config, self.env, device=self.device, model=model, optimizer=optimizer,
                                loader=loader)
        prep.config, prep.details = self.resolved.config, self.resolved.details
        model.to(self.device)  # before any technique: fused kernels and compile want the device
        for technique in registry:  # the written order: see each technique's `order`
            if technique.apply is not None:
                technique.apply(prep)
        self._step = TrainStep(prep.precision, prep.accumulator, prep.optimizer)
        if prep.optimizer is not None:
            prep.prepared_optimizer = BoostedOptimizer(prep.optimizer, self._step)
        self._micro_batcher = MicroBatcher(prep.accumulator.micro_batch_size)
        self._prep = prep
        if self.verbose and self.is_main_process:
            print(self.resolved.summary(), file=sys.stderr)
        results: list[Any] = [prep.model, prep.prepared_optimizer]
        if prep.prepared_loader is not None:
            results.append(prep.prepared_loader)
        if scheduler is not None:
            results.append(BoostedScheduler(scheduler, prep.prepared_optimizer))
        if criterion is not None:
            results.append(_loss_levers(registry, prep, criterion))
        return tuple(results)

    @property
    def precision(self) -> Any:
        """The precision policy (:mod:`torchboost.techniques.precision.precision_policy`), after ``prepare``."""
        return self._prep.precision if self._prep is not None else _UNPREPARED

    @property
    def _optimizer(self) -> BoostedOptimizer | None:
        return self._prep.prepared_optimizer if self._prep is not None else None

    @property
    def compile_stats(self) -> Any:
        """How compilation went (first-call seconds, fallback), after ``prepare``; else None."""
        return self._prep.compile_stats if self._prep is not None else None

    @property
    def micro_batcher(self) -> Any:
        """Runs ``train_step``; ``.size`` is the current micro-batch size (None: whole
        batch), ``.simulate_oom_from`` a test hook. None before ``prepare``."""
        return self._micro_batcher

    # -- the training step: each call goes to torchboost.step.TrainStep ------------------

    def autocast(self) -> AbstractContextManager:
        """Context for forward and loss: autocast in bf16/fp16 modes, nothing otherwise."""
        return self._step.autocast()

    def accumulate(self, model: nn.Module | None = None, *, num_samples: int | None = None) -> AbstractContextManager:
        """Context for one micro-step (forward, backward, ``optimizer.step()``, ``zero_grad()``).

        With ``accumulation.steps = K`` the optimizer really steps on every K-th micro-step
        and on the loader's last batch; before that, ``step`` and ``zero_grad`` do nothing
        and a DDP ``model`` skips its all-reduce (``no_sync``). ``num_samples``: samples in
        this micro-batch, when it does not come from the prepared loader.
        """
        default = self._prep.model if self._prep is not None else None
        return self._step.micro_step(model if model is not None else default, num_samples=num_samples)

    def backward(self, loss: torch.Tensor, *, num_items: int | float | torch.Tensor | None = None, **kwargs: Any) -> None:
        """``loss.backward()``, scaled in fp16 mode, weighted for accumulation.

        ``loss`` is a mean over the micro-batch; or, with ``num_items``, a sum over that
        many items (e.g. non-padding tokens), and the step then uses the window's sum
        divided by its total item count. Other keyword args go to ``backward``.
        """
        self._step.backward(loss, num_items=num_items, **kwargs)

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
        return self.micro_batcher.run(batch, compute_loss, model=self._prep.model, optimizer=self._optimizer,
                                      step=self._step)

    def unscale_(self, optimizer: BoostedOptimizer | None = None) -> None:
        """Unscale gradients in place before clipping them (fp16); a no-op otherwise."""
        target = optimizer if optimizer is not None else self._optimizer
        if target is None:
            raise RuntimeError("unscale_: no optimizer was prepared")
        inner = target.optimizer if isinstance(target, BoostedOptimizer) else target
        self._step.unscale_(inner)

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``optimizer.step()`` was skipped for fp16 overflow."""
        return bool(self._optimizer and self._optimizer.step_was_skipped)

    @property
    def is_main_process(self) -> bool:
        """Rank 0 (or not distributed): the process that prints and saves."""
        if self._prep is not None and self._prep.dist is not None:
            return self._prep.dist.rank == 0
        return self.env.rank == 0

    @property
    def at_window_boundary(self) -> bool:
        """No accumulation window is open: the last micro-step stepped (a checkpoint may be taken)."""
        return self._step.at_boundary

    @property
    def rank(self) -> int:
        """This process's rank (0 unless launched by torchrun with several)."""
        return self._prep.dist.rank if self._prep is not None and self._prep.dist is not None else 0

    @property
    def world_size(self) -> int:
        """Training processes (1 unless launched by torchrun with several)."""
        return self._prep.dist.world_size if self._prep is not None and self._prep.dist is not None else 1

    def summary(self) -> str:
        """The resolved configuration and the reason for each choice, as text."""
        if self.resolved is None:
            return "torchboost: not prepared yet; configured:\n" + self.config.to_toml_string()
        return self.resolved.summary()

    # -- checkpoints ------------------------------------------------------------------

    def save(self, path: str | Path, *, model: nn.Module | None = None, optimizer: Any = None,
             scheduler: Any = None, **extra: Any) -> None:
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
        state = booster_state(self._prep, resolved=self.resolved, model=model, optimizer=optimizer,
                              scheduler=scheduler, extra=extra)
        if self.is_main_process:
            save_checkpoint(path, state)

    def load(self, path: str | Path, *, model: nn.Module | None = None, optimizer: Any = None,
             scheduler: Any = None) -> dict[str, Any]:
        """Restore what ``save`` wrote into the given objects; returns the ``extra`` dict.

        The prepared loader resumes at the saved position on its next pass. Refuses
        (``CheckpointError``) a file that holds anything that would run code.
        """
        state = load_checkpoint(path, map_location=self.device)
        return restore_booster_state(path, state, self._prep, model=model, optimizer=optimizer, scheduler=scheduler)
