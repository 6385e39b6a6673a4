"""The script's objects the hooks saw: its DataLoaders, root modules, primary optimizer, autocast.

Modules and optimizers are held by weak reference: observing must not keep the script's
model alive. What the facts need of them is described while they live
(:func:`~torchboost.observe.record.facts_builder.build_facts`).
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from torchboost import env as _env
from torchboost.evidence.observed import LoaderFacts, TrainerFacts
from torchboost.observe.probes import describe, hf_trainer
from torchboost.reach.optimizer_owner import stepped_modules
from torchboost.observe.probes.stated_length import Stated, stated_on_stack
from torchboost.observe.record.optimizer_steps import OptimizerSteps

__all__ = ["ScriptObjects"]


class ScriptObjects:
    """What the hooks saw of the script's own objects, and its settings at the end of warm-up."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._loaders: dict[int, list[Any]] = {}  # id(loader) -> [LoaderFacts, batches, batches that reached backward]
        self._iter_loader: dict[int, int] = {}  # id(iterator) -> id(loader)
        self._last_batch: list[Any] | None = None  # the loader entry of the last batch, until a backward takes it
        self._roots: dict[int, list[Any]] = {}  # id(module) -> [weakref, outermost calls, called with grad on]
        self._primary: Any = None  # weakref to the optimizer whose step ends a step
        self._autocast: dict[str, str] = {}  # device type -> dtype seen on during forward
        self.first_forward_at: float | None = None
        """Clock at the first outermost forward."""
        self.settings: dict[str, Any] = {}
        """``{"env": Environment.to_dict(), "cpu_threads": n}`` from :meth:`snapshot_settings`."""
        self.probe_started_cuda = False
        """Our own environment probe, not the script, started CUDA."""
        self.trainer: TrainerFacts | None = None
        """The Hugging Face Trainer driving the loop, described at its first optimizer step."""
        self.stated = Stated()
        """The run's length as the script set it (its defaults too), read at the end of warm-up."""
        self.optimizer_steps = OptimizerSteps(lambda optimizer: stepped_modules(optimizer, self.roots()))
        """Every optimizer's steps, the primary's and a second one's (a GAN's)."""

    # -- fed by the hooks ----------------------------------------------------------------
    def loader_iter(self, loader: Any, iterator: Any) -> bool:
        """``loader`` made ``iterator``; describes the loader (may raise: the caller records
        it). True when it is not a training loader while another is (an evaluation's)."""
        self._iter_loader[id(iterator)] = id(loader)
        entry = self._loaders.setdefault(id(loader), [LoaderFacts(), 0, 0])
        entry[0] = describe.describe_loader(loader)
        return entry[2] == 0 and any(other[2] for other in self._loaders.values())

    def loader_batch(self, iterator: Any) -> bool:
        """``iterator`` gave a batch; True when its loader is a training loader (its
        batches reached backward before)."""
        entry = self._loaders.get(self._iter_loader.get(id(iterator), -1))
        if entry is None:
            return False
        entry[1] += 1
        self._last_batch = entry
        return entry[2] > 0

    def reached_backward(self) -> None:
        """An outermost backward starts: the last batch fetched reached it."""
        if self._last_batch is not None:
            self._last_batch[2] += 1
            self._last_batch = None

    def forward(self, module: torch.nn.Module, autocast_devices: tuple[str, ...]) -> bool:
        """An outermost call of ``module`` starts; notes autocast as it is on now. True when
        the call is an evaluation: gradients are off and ``module`` was called with them on
        before (a module only ever called with them off, a teacher, a frozen encoder, is
        part of the training step)."""
        if self.first_forward_at is None:
            self.first_forward_at = self._clock()
        grad = torch.is_grad_enabled()
        entry = self._roots.get(id(module))
        if entry is None:
            entry = self._roots[id(module)] = [weakref.ref(module), 1, grad]
        else:
            entry[1] += 1
            entry[2] = entry[2] or grad
        for device_type in autocast_devices:
            if torch.is_autocast_enabled(device_type):
                self._autocast[device_type] = str(torch.get_autocast_dtype(device_type)).removeprefix("torch.")
        return entry[2] and not grad

    def adopt_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """``optimizer``'s steps are the step boundaries from now on."""
        self._primary = weakref.ref(optimizer)

    def look_for_trainer(self) -> None:
        """Describe the Hugging Face Trainer on the call stack, if one is: called from the
        first optimizer step, which a Trainer's own loop calls (may raise: the caller records it)."""
        trainer = hf_trainer.find_trainer()
        if trainer is not None:
            self.trainer = hf_trainer.describe_trainer(trainer)

    def read_stated_length(self, steps_run: int) -> None:
        """Read the run's length from the script's frames on the stack (:func:`stated_on_stack`;
        ``steps_run``: the steps so far, which no length is): called from a hook inside the
        script's loop, at the end of warm-up."""
        self.stated = stated_on_stack(after=steps_run)

    # -- read by the recorder and the facts ------------------------------------------------
    @property
    def has_primary(self) -> bool:
        """An optimizer was adopted (its steps, not backward calls, are the boundaries)."""
        return self._primary is not None

    def is_primary(self, optimizer: torch.optim.Optimizer) -> bool:
        """``optimizer`` is the one whose steps are the boundaries."""
        return self._primary is not None and self._primary() is optimizer

    def stepped(self, optimizer: torch.optim.Optimizer) -> bool:
        """``optimizer`` stepped (counted in :attr:`optimizer_steps`); True when it is the primary."""
        primary = self.is_primary(optimizer)
        self.optimizer_steps.count(optimizer, primary)
        return primary

    def primary_optimizer(self) -> torch.optim.Optimizer | None:
        """The adopted optimizer, while it lives."""
        return self._primary() if self._primary is not None else None

    def roots(self) -> list[torch.nn.Module]:
        """Live modules seen called outermost (the model, a loss module, ...)."""
        return [m for m in (entry[0]() for entry in self._roots.values()) if m is not None]

    def model(self) -> torch.nn.Module | None:
        """The model: of the live roots, one with parameters called most (a loss module has none)."""
        roots = [(entry[0](), entry[1]) for entry in self._roots.values()]
        roots = [(m, calls) for m, calls in roots if m is not None]
        if not roots:
            return None
        return max(roots, key=lambda r: (any(True for _ in r[0].parameters()), r[1]))[0]

    def main_loader(self) -> LoaderFacts | None:
        """The training loader: the one whose batches reached backward most (an evaluation
        loader's never do, however many it gives); else the one that gave the most batches."""
        return max(self._loaders.values(), key=lambda e: (e[2], e[1]))[0] if self._loaders else None

    def autocast_dtype(self, device: str) -> str | None:
        """The autocast dtype seen on ``device`` (else on any device), or None."""
        return self._autocast.get(device.split(":")[0]) or next(iter(self._autocast.values()), None)

    def snapshot_settings(self) -> None:
        """Probe the machine and the thread count: at the end of warm-up, when the script has
        set itself up (CUDA_VISIBLE_DEVICES, threads), so probing cannot disturb that setup."""
        cuda_before = torch.cuda.is_initialized()
        self.settings = {"env": _env.probe().to_dict(), "cpu_threads": torch.get_num_threads()}
        self.probe_started_cuda |= not cuda_before and torch.cuda.is_initialized()
