"""Apply torchboost settings to an unmodified training script, from inside its process.

Used by ``torchboost tune`` trials and ``torchboost run``. What it applies is a
:class:`~torchboost.plan.Plan`'s settings, as resolved there; what each technique does
with its fields is its descriptor's :class:`~torchboost.techniques.registry.NoCode` hooks,
and this module owns the patching that reaches them, restored by :meth:`Applier.uninstall`:

* process-wide switches (threads, TF32) are set at install;
* ``DataLoader.__init__`` is wrapped (by :mod:`torchboost.reach.loader_patch`, the one
  module that patches the DataLoader) so loaders are built with the new arguments (workers
  are not raised for an IterableDataset that does not shard by worker: each would yield
  the whole stream; the loader technique says so on stderr);
* the root module (the first module with trainable parameters called, with gradients on,
  from outside any other forward) is handed to the techniques after its first forward
  (compile, bf16 autocast); they take effect from the second forward call;
* before an optimizer's first step (its state still empty) it is handed to the
  techniques (fused or foreach kernels, switched in place);
* right after that, what holds of every setting is read back (:attr:`Applier.effect`):
  a technique with an ``in_effect`` hook reads the live state (the threads now, the
  loaders the script built), so a setting the script overrode itself is reported as
  such; the others are reported by what their hooks did. A script that takes no
  optimizer step is read at ``uninstall``.

When the script itself prepares a :class:`torchboost.Booster`, the Booster applies the
configuration and claims its techniques in the :class:`~torchboost.handover.Claims` the
applier is given; the model and optimizer hooks here then stand down, so nothing is
applied twice. A filter a technique attaches to a library's logger meanwhile is taken
off at ``uninstall`` (:mod:`torchboost.reach.log_filters`).
"""

from __future__ import annotations

import functools
import weakref
from itertools import chain
from typing import Any, Mapping

import torch
import torch.optim.optimizer as _optim
from torch import nn
from torch.nn.modules import module as _nn_module

from torchboost.handover import Claims
from torchboost.plan import Plan
from torchboost.reach.loader_patch import LoaderPatch, rewritten_arguments
from torchboost.reach.log_filters import LoggerFilters
from torchboost.reach.optimizer_owner import module_names
from torchboost.techniques.registry import NoCode, Technique, techniques

__all__ = ["Applier"]


def _hooks(settings: Mapping[str, Any]) -> list[tuple[Technique, NoCode, dict[str, Any]]]:
    """(technique, its no-code hooks, the fields the settings set in its section)."""
    out = []
    for technique in techniques():
        if technique.section is None or technique.nocode is None:
            continue
        values = settings.section(technique.section)
        if values:
            out.append((technique, technique.nocode, values))
    return out


def _trainable(module: nn.Module) -> bool:
    return any(p.requires_grad for p in module.parameters())


class _Coverage:
    """What a technique applied at the root module covers: the other modules the loop
    trains (called outermost, gradients on, with parameters to train) up to its first
    optimizer step run outside the root's forward, and get nothing applied there (three
    modules whose outputs the script combines: bf16 around one of them)."""

    LIMIT = 256
    """Outermost calls watched after the root's: then the global hooks go, step or none."""

    def __init__(self) -> None:
        self.calls = 0
        self._others: dict[int, weakref.ref] = {}

    def seen(self, module: nn.Module) -> None:
        """``module`` was called outermost to train, after the root."""
        self.calls += 1
        self._others.setdefault(id(module), weakref.ref(module))

    def words(self, root: nn.Module) -> str | None:
        """"covers enc1, 1 of the 3 modules the loop trains; enc2 and head run outside it";
        None when the root is all the loop trains."""
        others = [m for m in (ref() for ref in self._others.values()) if m is not None and m is not root]
        if not others:
            return None
        root_name, *names = module_names([root, *others])
        outside = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        return (f"covers {root_name}, 1 of the {len(names) + 1} modules the loop trains; {outside} "
                f"run{'s' if len(names) == 1 else ''} outside it")


class Applier:
    """Installs the patches for ``plan``'s settings; ``uninstall`` restores everything.

    The plan is trusted as it is given (:mod:`torchboost.plan` resolved it, once).
    ``claims``: what a Booster in the script applies itself (:mod:`torchboost.handover`);
    ``torchboost run`` and the observed child pass the process's. By default a ``Claims``
    of its own: no Booster, so every setting is applied from here.
    """

    def __init__(self, plan: Plan, *, claims: Claims | None = None):
        self.settings = plan.apply
        self._hooks = _hooks(self.settings)
        self._claims = claims if claims is not None else Claims()
        self._loader_patch: LoaderPatch | None = None
        self._log_filters = LoggerFilters()
        self._handles: list[Any] = []
        self._forward_handles: list[Any] = []
        self._root: weakref.ref | None = None
        self._coverage: _Coverage | None = None  # the root's, once it is boosted
        self._depth = 0
        self._notes: dict[str, list[str]] = {technique.name: [] for technique, _, _ in self._hooks}
        self._loaders: list[weakref.ref] = []  # in the order built; a loader gone meanwhile is not read
        self.effect: list[str] | None = None
        """What held of every setting at the first optimizer step (or at ``uninstall``), in words."""
        self.effect_at = "the first optimizer step"
        """When :attr:`effect` was read ("the script's end" when no step came first)."""

    @property
    def notes(self) -> list[str]:
        """What was applied, in words, for the trial's record."""
        return list(chain.from_iterable(self._notes.values()))

    # -- install / uninstall -----------------------------------------------------------

    def install(self) -> "Applier":
        """Apply process-wide settings now and patch for the rest."""
        self._log_filters.start()
        for technique, hooks, values in self._hooks:
            if hooks.at_start is not None:
                hooks.at_start(values, self._notes[technique.name])
        rewrites = [functools.partial(hooks.loader_arguments, values) for _, hooks, values in self._hooks
                    if hooks.loader_arguments is not None]
        if rewrites:
            self._loader_patch = rewritten_arguments(rewrites, built=self._built).install()
        if any(hooks.at_root is not None and hooks.wants_root(values) for _, hooks, values in self._hooks):
            # Global hooks send every module call through PyTorch's slower hook path: they
            # are removed as soon as the root module has been found and boosted.
            self._forward_handles = [
                _nn_module.register_module_forward_pre_hook(self._on_forward_pre),
                _nn_module.register_module_forward_hook(self._on_forward_post, always_call=True),
            ]
        if self._hooks:
            self._handles.append(_optim.register_optimizer_step_pre_hook(self._on_first_step))
        return self

    def uninstall(self) -> None:
        """Remove every patch and hook (the model keeps what was applied to it); read
        :attr:`effect` now if no optimizer step did."""
        self._note_coverage()
        if self.effect is None:
            self.effect, self.effect_at = self._read_effect(), "the script's end"
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._loader_patch is not None:
            self._loader_patch.uninstall()
            self._loader_patch = None
        self._log_filters.release()

    def _built(self, loader: Any) -> None:
        self._loaders.append(weakref.ref(loader))

    def _booster_in_charge(self, technique: Technique | None = None) -> bool:
        if technique is None:
            return any(self._claims.claimed(t.name) for t, _, _ in self._hooks)
        return self._claims.claimed(technique.name)

    # -- model ---------------------------------------------------------------------------

    def _remove_forward_hooks(self) -> None:
        for handle in self._forward_handles:
            handle.remove()
        self._forward_handles = []

    def _on_forward_pre(self, module: nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():
            return
        self._depth += 1
        # The root is the first outermost module called to train: with gradients on and
        # parameters to train (not a data-labelling teacher under no_grad, not a loss).
        if (self._depth == 1 and self._root is None and torch.is_grad_enabled()
                and not self._booster_in_charge() and _trainable(module)):
            self._root = weakref.ref(module)
        elif self._depth == 1 and self._coverage is not None and torch.is_grad_enabled() and _trainable(module):
            self._coverage.seen(module)
            if self._coverage.calls > _Coverage.LIMIT:
                self._remove_forward_hooks()

    def _on_forward_post(self, module: nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling():
            return
        self._depth -= 1  # always_call: also after a forward that raised
        root = self._root() if self._root is not None else None
        # Once: a loop may call the root several times before its first optimizer step
        # (micro-batches); the coverage watch starting says it was boosted.
        if self._depth == 0 and root is module and self._coverage is None and "forward" not in module.__dict__:
            self._boost_root(module)
            # The hooks stay until the first optimizer step: which other modules the loop
            # trains, outside the root, is what a technique applied at the root leaves out.
            self._coverage = _Coverage()

    def _boost_root(self, module: nn.Module) -> None:
        for technique, hooks, values in self._hooks:
            if hooks.at_root is not None and hooks.wants_root(values) and not self._booster_in_charge(technique):
                hooks.at_root(values, module, self._notes[technique.name])

    # -- optimizer -----------------------------------------------------------------------

    def _note_coverage(self) -> None:
        """Once, at the first optimizer step (or the end): what each technique applied at the
        root covers, added to its note when the loop trains other modules too."""
        if self._coverage is None and not self._forward_handles:
            return  # done already: this runs at every step
        self._remove_forward_hooks()
        coverage, self._coverage = self._coverage, None
        root = self._root() if self._root is not None else None
        words = coverage.words(root) if coverage is not None and root is not None else None
        for technique, hooks, _ in self._hooks if words else ():
            notes = self._notes[technique.name]
            if hooks.at_root is not None and notes:
                notes[-1] = f"{notes[-1]} ({words})"

    def _on_first_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._note_coverage()
        if optimizer.state:
            return
        for technique, hooks, values in self._hooks:
            if hooks.at_first_step is not None and not self._booster_in_charge(technique):
                hooks.at_first_step(values, optimizer, self._notes[technique.name])
        if self.effect is None:
            # Read once. The hook stays (uninstall removes it): removed here, inside the
            # optimizer's own loop over its pre-hooks, it would break that loop
            # ("OrderedDict mutated during iteration"); later steps return above or here.
            self.effect = self._read_effect()

    # -- what held -------------------------------------------------------------------------

    def _read_effect(self) -> list[str]:
        """Every setting, in words: read back where its technique can, else its notes."""
        out: list[str] = []
        loaders = [loader for loader in (ref() for ref in self._loaders) if loader is not None]
        for technique, hooks, values in self._hooks:
            if self._booster_in_charge(technique):
                out.append(f"{technique.title}: applied by the script's Booster")
            elif hooks.in_effect is not None:
                out += hooks.in_effect(values, loaders)
            elif self._notes[technique.name]:
                out += self._notes[technique.name]
            else:  # e.g. compile when no model trained before the step
                settings = ", ".join(f"{key}={value}" for key, value in values.items())
                out.append(f"{technique.section.section} {settings}: not applied, nothing to apply it to by then")
        return out
