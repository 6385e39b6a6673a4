"""The technique descriptor: what the rest of torchboost needs to know of one technique.

Each technique module under :mod:`torchboost.techniques` (for a family, the package's
``__init__``: compile, precision, loader) ends with ``TECHNIQUE = Technique(...)``: its
config section, how ``"auto"`` resolves and why, how it applies inside the Booster, how
it applies from outside to an unmodified script (or why it cannot), its tuner levers
with their parity kind, the finding ids that propose them and its Lightning and
Accelerate spellings. :func:`techniques` collects every module's
descriptor in application order; the Booster, ``torchboost run``'s applier, the tuner and
the reports iterate it and know no technique by name; the tuner's context holds each
one's own tuning facts, from its ``tune_context``. Adding a technique is one new module (and its tests);
shared model surgery is in :mod:`torchboost.techniques._model`.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch import nn

import torchboost.techniques as _package
from torchboost.config import BoostConfig, Overlay, register_section
from torchboost.evidence.observed import Facts, register_facts
from torchboost.step import StepPrecision, StepWindow
from torchboost.techniques._quick import QuickSwitch
from torchboost.techniques._tuning import Lever, Parity, TuneContext

__all__ = ["FrameworkSpelling", "Lever", "NoCode", "Parity", "Preparation", "ProbeContext", "QuickSwitch",
           "ResolveContext", "Resolution", "Rule", "Technique", "TuneContext", "application_order", "techniques"]


@dataclass
class ResolveContext:
    """What ``"auto"`` is resolved against, and the configuration resolved so far."""

    env: Any
    device: torch.device
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    loader: Any
    config: BoostConfig
    """The user's configuration with the techniques resolved before this one applied."""


@dataclass(frozen=True)
class Resolution:
    """One technique's concrete choices: the values, the reason for each, and any detail
    object its ``apply`` needs (e.g. the loader's settings)."""

    values: Overlay
    reasons: dict[str, str]
    """Keyed by dotted field name, for the printed and saved summary."""
    detail: Any = None


@dataclass
class Preparation:
    """What ``Booster.prepare`` builds, passed through each technique's ``apply`` in turn.

    Techniques fill in the step's typed inputs (``precision``, ``accumulator``); the
    Booster then builds the step from them (:class:`torchboost.step.TrainStep`).
    """

    env: Any
    device: torch.device
    config: BoostConfig
    """Concrete: no "auto" left."""
    details: dict[str, Any]
    """Each technique's :attr:`Resolution.detail`, by technique name."""
    model: nn.Module
    optimizer: torch.optim.Optimizer | None = None
    """The optimizer the step drives (rebuilt when its implementation changed)."""
    loader: Any = None
    scheduler: Any = None
    dist: Any = None
    """The process-group handle (:mod:`torchboost.techniques.distributed`)."""
    precision: StepPrecision | None = None
    """Autocast and the loss scaler (set by the precision technique)."""
    accumulator: StepWindow | None = None
    """The accumulation window (set by the accumulation technique)."""
    compile_stats: Any = None
    batch_transforms: list[Callable[[Any], Any]] = field(default_factory=list)
    """Applied to every batch the prepared loader yields, after the move to the device."""
    prepared_loader: Any = None
    prepared_optimizer: Any = None
    """Set by the Booster after every ``apply``: the optimizer driven by the step."""


@dataclass(frozen=True)
class NoCode:
    """How a technique reaches an unmodified script, from inside its process.

    Every hook gets ``values``, the fields of the technique's section the settings set
    (by field name), and ``notes``, a list to append what was applied to, in words. The
    applier (:mod:`torchboost.nocode`) owns the patching; these say what to do.
    """

    refuse: Callable[[dict[str, Any]], str | None] = lambda values: None
    """Why these values need the Booster in the loop; None when they can be applied."""
    at_start: Callable[[dict[str, Any], list[str]], None] | None = None
    """Process-wide switches, set when the applier is installed."""
    loader_arguments: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    """Rewrites a map-style DataLoader's constructor arguments in place."""
    wants_root: Callable[[dict[str, Any]], bool] = lambda values: False
    """Whether :attr:`at_root` has anything to do (finding the root module costs hooks)."""
    at_root: Callable[[dict[str, Any], nn.Module, list[str]], None] | None = None
    """The root module (the outermost trainable module) after its first forward."""
    at_first_step: Callable[[dict[str, Any], torch.optim.Optimizer, list[str]], None] | None = None
    """An optimizer before its first step (its state still empty)."""
    in_effect: Callable[[dict[str, Any], list[Any]], list[str]] | None = None
    """What holds of ``values`` at the first optimizer step (or the script's end), read back
    from live state, given the DataLoaders built meanwhile: a value the script overrode says
    so. None: the notes the other hooks appended say it."""


@dataclass(frozen=True)
class FrameworkSpelling:
    """The same setting in a framework's own words."""

    lightning: dict[str, Any] = field(default_factory=dict)
    """``lightning.Trainer`` keyword arguments."""
    accelerate: dict[str, Any] = field(default_factory=dict)
    """Keys of an ``accelerate`` config file (``accelerate launch --config_file``)."""
    accelerator: dict[str, Any] = field(default_factory=dict)
    """``accelerate.Accelerator(...)`` keyword arguments the config file has no key for."""
    transformers: dict[str, Any] = field(default_factory=dict)
    """``transformers.TrainingArguments`` keyword arguments (Hugging Face's Trainer)."""
    code: tuple[str, ...] = ()
    """The same setting in plain PyTorch: the lines a user writes in their own loop (a
    framework user needs them only where the framework has no flag for it)."""
    unflagged: tuple[str, ...] = ()
    """Plain-PyTorch lines for a part of the setting no framework has a flag for: every
    framework's export lists them, whatever flags it has for the rest."""

    def training_arguments(self) -> str:
        """The ``TrainingArguments(...)`` call with the Trainer's keywords, on one line; ""
        where it has none."""
        keywords = {k: v for k, v in self.transformers.items() if v is not None}
        return ("TrainingArguments(" + ", ".join(f"{k}={v!r}" for k, v in keywords.items()) + ")") if keywords else ""


@dataclass(frozen=True)
class Rule:
    """One diagnosis a technique makes: ``check(facts, *, <threshold>=<default>) -> Finding | None``.

    Thresholds are the check's keyword parameters, with their unit in the name
    (``compute_pct=50.0``); the finding it returns has ``id``.
    """

    id: str
    check: Callable[..., Any]
    example: Callable[[], Any] | None = None
    """Facts on which the rule fires: a worked example of what it looks for; the tests run
    every rule on its example and check the finding's fix renders and round-trips."""


@dataclass(frozen=True)
class ProbeContext:
    """What the observer hands a technique's probe, once, at the end of the warm-up."""

    model: nn.Module | None
    """The root module (the outermost trainable module the loop calls), if one was seen."""
    optimizer: torch.optim.Optimizer | None
    loader: Any
    """The DataLoader iterated most, or None."""
    device: str
    """"cpu", "cuda" or "mps": the model's device, else the process's."""
    autocast_dtype: str | None = None
    """"bfloat16" / "float16" when the forward ran under autocast, else None."""
    grad_scaler: bool = False
    """A GradScaler drove the optimizer step."""
    other_load_pct: float | None = None
    """Other processes' CPU use while the steps were recorded, percent of the machine (None:
    not measured yet): a quick probe's switch may size itself by it."""
    wanted: Mapping[str, Any] = field(default_factory=dict)
    """A tuning trial's candidate change, dotted names, when its bursts ask for one: a switch
    with a size of its own (a thread count) makes exactly that one."""
    host_lines: tuple[Any, ...] = ()
    """The user's lines the line sampler found the recorded steps' time in
    (:class:`~torchboost.evidence.host_lines.HostLine`); empty at the end of warm-up, and
    where the lines are not sampled (a tuning trial)."""


@dataclass(frozen=True)
class Technique:
    """One technique, described once."""

    name: str
    title: str
    after: tuple[str, ...] = ()
    """Techniques applied before this one in ``Booster.prepare`` (their names): with
    :attr:`placed`, its place in the one application order the registry derives."""
    before: tuple[str, ...] = ()
    """Techniques applied after this one (their names), for a newcomer that must come
    ahead of an existing technique without editing it."""
    placed: str = ""
    """Why it comes where it does, in words (shown with the order)."""
    section: type | None = None
    """Its ``torchboost.toml`` table (a frozen dataclass with ``section`` and ``off()``);
    the file's tables follow the application order."""
    resolve: Callable[[ResolveContext], Resolution] | None = None
    """``"auto"`` -> concrete values, with reasons; None: the section is taken as written."""
    setup: Callable[[Preparation], None] | None = None
    """Before anything is resolved (the process group, which later steps talk through)."""
    apply: Callable[[Preparation], None] | None = None
    """Inside the Booster: changes the model, optimizer, loader or process, in order."""
    loss: Callable[[Preparation, Callable[..., Any]], Callable[..., Any]] | None = None
    """A loss-level lever (a fused cross-entropy): ``loss(prep, criterion)`` returns the
    criterion the loop uses instead, after every ``apply``, in the same order. Only when
    the script hands its criterion to ``Booster.prepare(..., criterion=)``."""
    nocode: NoCode | None = None
    """From outside, on an unmodified script; None: it cannot (see :attr:`nocode_refusal`)."""
    nocode_refusal: str = "it needs the Booster in the training loop"
    levers: tuple[Lever, ...] = ()
    """Tuner candidates."""
    spell: Callable[[Any], FrameworkSpelling] | None = None
    """The concrete section in plain PyTorch's, Lightning's, Accelerate's and Hugging
    Face's words; None: not spelled yet."""
    facts: type | None = None
    """Its own facts: a frozen dataclass with ``technique: ClassVar[str]`` (this name),
    stored in ``Facts.techniques`` and ``report.json``; read with ``facts.seen(Kind)``."""
    probe: Callable[[ProbeContext], Any] | None = None
    """Reads :attr:`facts` from the live objects, once per observed run."""
    observe: Callable[[float], Any] | None = None
    """Reads :attr:`facts` from what the process itself kept of the run (torch.compile's
    compiles), at every facts write: what happens after warm-up counts too; given the
    observation's start (``time.time()``), so what happened before it does not. With a
    probe as well, this one's facts win."""
    rules: tuple[Rule, ...] = ()
    """Its diagnoses; their ids rank its levers (:attr:`Lever.finding_ids`)."""
    quick_probe: Callable[[ProbeContext], QuickSwitch | None] | None = None
    """Its fix as an in-process switch the doctor times for a few steps against plain ones,
    after the profiler window (:mod:`torchboost.techniques._quick`); None: not so probed."""
    tune_context: Callable[[Facts], Any] | None = None
    """Its own tuning facts (an object of its own frozen dataclass, with a default for each
    field), read from the doctor's facts; its levers read them with ``ctx.own(Kind)``
    (:meth:`TuneContext.own`)."""
    order: int = -1
    """Its position in the application order, from 1 (set by :func:`techniques`)."""

    @property
    def finding_ids(self) -> tuple[str, ...]:
        """Doctor findings that propose this technique (those of its levers)."""
        return tuple(dict.fromkeys(fid for lever in self.levers for fid in lever.finding_ids))


_REGISTRY: list[Technique] = []


def _ordered(found: list[Technique]) -> list[Technique]:
    """Each technique after those it names in ``after`` and before those in ``before``; ties by
    name, so the order is stable."""
    by_name = {t.name: t for t in found}
    needs: dict[str, set[str]] = {t.name: set(t.after) for t in found}
    for t in found:
        unknown = [name for name in (*t.after, *t.before) if name not in by_name]
        if unknown:
            raise RuntimeError(f"technique {t.name!r} is placed against unknown technique(s) {unknown}")
        for later in t.before:
            needs[later].add(t.name)
    placed: list[Technique] = []
    waiting = sorted(found, key=lambda t: t.name)
    while waiting:
        done = {p.name for p in placed}
        ready = next((t for t in waiting if needs[t.name] <= done), None)
        if ready is None:
            raise RuntimeError(f"the techniques' 'after' form a cycle among {[t.name for t in waiting]}")
        placed.append(ready)
        waiting.remove(ready)
    return [dataclasses.replace(t, order=i) for i, t in enumerate(placed, start=1)]


def techniques() -> list[Technique]:
    """Every technique module's descriptor, in application order (loaded once).

    The order is derived from each technique's ``after`` alone; the config sections are
    registered in the same order, so ``torchboost.toml``'s tables follow it.
    """
    if not _REGISTRY:
        found = []
        for info in pkgutil.iter_modules(_package.__path__):
            module = importlib.import_module(f"{_package.__name__}.{info.name}")
            technique = getattr(module, "TECHNIQUE", None)
            if isinstance(technique, Technique):
                found.append(technique)
        names = [t.name for t in found]
        if len(set(names)) != len(names):
            raise RuntimeError(f"two technique modules share a name: {sorted(names)}")
        ordered = _ordered(found)
        for technique in ordered:
            if technique.section is not None:
                register_section(technique.section)
            if technique.facts is not None:
                register_facts(technique.facts)
        _REGISTRY.extend(ordered)
    return list(_REGISTRY)


def application_order() -> list[tuple[str, str]]:
    """``(name, why it comes there)`` for every technique, in the order the Booster applies them."""
    return [(t.name, t.placed) for t in techniques()]
