"""Optimizer implementation: rebuild a torch optimizer with its foreach or fused kernels.

torch's built-in optimizers have up to three implementations of the same update: a
per-parameter for-loop ("default" here, torch's choice on CPU), "foreach" (one kernel
launch per group of tensors; fast on CUDA, a plain loop on CPU) and "fused" (the whole
update in one kernel per device and dtype; Adam, AdamW, SGD and Adagrad, on CPU and
CUDA in torch 2.13). They compute the same update up to float rounding.

:func:`resolve_optimizer` picks one; :func:`apply_optimizer_implementation` rebuilds the
optimizer with it, keeping its parameter groups, per-group hyperparameters and state.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from torchboost.config import AUTO, Overlay, check_choice
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import amdahl, r, view
from torchboost.techniques.registry import (
    FrameworkSpelling, Lever, NoCode, Parity, Preparation, ProbeContext, QuickSwitch, ResolveContext, Resolution, Rule,
    Technique, TuneContext,
)

__all__ = [
    "OptimizerConfig",
    "FOREACH_OPTIMIZERS",
    "FUSED_DEVICES",
    "IMPLEMENTATIONS",
    "apply_optimizer_implementation",
    "switch_implementation_in_place",
    "current_implementation",
    "resolve_optimizer",
    "quick_switch",
]

IMPLEMENTATIONS = ("default", "foreach", "fused")
"""The concrete implementations; "auto" resolves to one of these."""


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

_O = torch.optim
FUSED_DEVICES: dict[type, frozenset[str]] = {
    _O.Adam: frozenset({"cpu", "cuda"}),
    _O.AdamW: frozenset({"cpu", "cuda"}),
    _O.SGD: frozenset({"cpu", "cuda"}),
    _O.Adagrad: frozenset({"cpu", "cuda"}),
}
"""Optimizer classes with a ``fused=`` implementation, and the device types we use it on
(torch 2.13 also has some on mps/xpu; not chosen here until measured)."""

FOREACH_OPTIMIZERS: frozenset[type] = frozenset(
    getattr(_O, name)
    for name in (
        "Adadelta", "Adafactor", "Adagrad", "Adam", "Adamax", "AdamW",
        "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop", "SGD",
    )
    if hasattr(_O, name)  # Adafactor is newer than some supported torch versions
)
"""Optimizer classes with a ``foreach=`` implementation."""

_FOREACH_FAST_DEVICES = frozenset({"cuda"})
"""Device types where foreach has real multi-tensor kernels; elsewhere it loops."""


def current_implementation(optimizer: torch.optim.Optimizer) -> str:
    """"fused" or "foreach" when every group asks for it explicitly, else "default"."""
    groups = optimizer.param_groups
    if groups and all(g.get("fused") for g in groups):
        return "fused"
    if groups and all(g.get("foreach") for g in groups):
        return "foreach"
    return "default"


def _blocker(optimizer: torch.optim.Optimizer) -> str:
    """Why no foreach/fused rebuild is possible regardless of device; "" when none."""
    for group in optimizer.param_groups:
        if group.get("differentiable"):
            return "a param group has differentiable=True, which foreach/fused do not support"
        for p in group["params"]:
            if not torch.is_floating_point(p):
                return f"a parameter is {p.dtype} (complex or integer); foreach/fused need real floats"
            if p.is_sparse:
                return "a parameter is sparse; foreach/fused need dense tensors"
    return ""


def _available(optimizer: torch.optim.Optimizer, device_type: str) -> tuple[str, ...]:
    cls = type(optimizer)
    out = []
    if device_type in FUSED_DEVICES.get(cls, ()):
        out.append("fused")
    if cls in FOREACH_OPTIMIZERS:
        out.append("foreach")
    return tuple(out)


def resolve_optimizer(
    requested: str, optimizer: torch.optim.Optimizer, *, device: torch.device
) -> tuple[str, str]:
    """Resolve ``optimizer.implementation`` to "default", "foreach" or "fused", with the reason.

    ``auto``: fused where the class has it on ``device``, else foreach where it is fast
    (CUDA), else default. An explicit request the optimizer cannot honour falls back to
    what ``auto`` would pick, and the reason says so. Classes other than torch's own
    (user subclasses included: their ``__init__`` may differ) stay "default".
    """
    device_type = torch.device(device).type
    cls = type(optimizer)
    name = cls.__name__
    if requested == "default":
        return "default", "set in config: the optimizer as built"
    if requested not in ("auto", *IMPLEMENTATIONS):
        raise ValueError(f'optimizer.implementation: expected auto | default | foreach | fused; got "{requested}"')
    if cls not in FOREACH_OPTIMIZERS and cls not in FUSED_DEVICES:
        return "default", f"{name} is not one of torch's built-in optimizers; left as built"
    blocker = _blocker(optimizer)
    if blocker:
        return "default", blocker
    available = _available(optimizer, device_type)
    if requested in available:
        note = ""
        if requested == "foreach" and device_type not in _FOREACH_FAST_DEVICES:
            note = f" (no multi-tensor kernels on {device_type}: runs as a loop)"
        return requested, f"set in config{note}"
    if "fused" in available:
        choice, why = "fused", f"{name} has a fused kernel on {device_type}: one kernel per step"
    elif "foreach" in available and device_type in _FOREACH_FAST_DEVICES:
        choice, why = "foreach", f"{name} has no fused kernel on {device_type}; foreach batches the launches"
    else:
        choice, why = "default", f"{name} has no fused kernel on {device_type}, and foreach only loops there"
    if requested != "auto":
        why = f"{requested} requested but not available for {name} on {device_type}; {why}"
    return choice, why


def _flags(optimizer: torch.optim.Optimizer, implementation: str) -> dict[str, bool | None]:
    cls = type(optimizer)
    if implementation == "fused" and cls not in FUSED_DEVICES:
        raise ValueError(f'{cls.__name__} has no fused implementation; use "foreach" or "auto"')
    if implementation == "foreach" and cls not in FOREACH_OPTIMIZERS:
        raise ValueError(f'{cls.__name__} has no foreach implementation; use "default" or "auto"')
    flags: dict[str, bool | None] = {"foreach": implementation == "foreach", "fused": implementation == "fused"}
    if implementation == "fused":
        flags["foreach"] = None  # fused refuses foreach=False only in some versions; None is neutral
    init_names = set(inspect.signature(cls.__init__).parameters)
    return {k: v for k, v in flags.items() if k in init_names}  # RMSprop & co. have no fused=


def switch_implementation_in_place(optimizer: torch.optim.Optimizer, implementation: str) -> bool:
    """Switch an optimizer that has not stepped yet to ``implementation`` by its group flags.

    The optimizer reads ``foreach``/``fused`` from each group at every step, and with no
    state yet there is nothing to convert, so the object itself is switched: schedulers
    (chained or sequential ones too) and anything else bound to it stay bound. Returns
    False, changing nothing, when the optimizer already has state.
    """
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f'implementation: expected default | foreach | fused; got "{implementation}"')
    if implementation == "default" or current_implementation(optimizer) == implementation:
        return True
    if optimizer.state:
        return False
    flags = _flags(optimizer, implementation)
    blocker = _blocker(optimizer)
    if blocker:
        raise ValueError(f"cannot use {implementation}: {blocker}")
    devices = {p.device.type for g in optimizer.param_groups for p in g["params"]}
    if implementation == "fused" and not devices <= FUSED_DEVICES[type(optimizer)]:
        raise ValueError(f"{type(optimizer).__name__} has no fused kernel on {', '.join(sorted(devices))}")
    for group in optimizer.param_groups:
        group.update(flags)
    optimizer.defaults.update(flags)
    return True


def apply_optimizer_implementation(
    optimizer: torch.optim.Optimizer, implementation: str
) -> torch.optim.Optimizer:
    """The optimizer with ``implementation`` ("default" returns ``optimizer`` itself).

    An optimizer that has not stepped yet is switched in place (the same object comes
    back). One with state is rebuilt: same class, the same parameter groups (same
    parameters, per-group hyperparameters) and the same state (``load_state_dict`` of the
    old one's ``state_dict``); its state tensors are shared with the old optimizer, which
    must not be stepped again, and anything bound to the old object (an LR scheduler,
    hooks) must be bound to the new one.
    """
    if switch_implementation_in_place(optimizer, implementation):
        return optimizer
    cls = type(optimizer)
    flags = _flags(optimizer, implementation)
    init_names = set(inspect.signature(cls.__init__).parameters)
    defaults = {k: v for k, v in optimizer.defaults.items() if k in init_names}
    defaults.update(flags)
    groups = []
    for group in optimizer.param_groups:
        groups.append({**{k: v for k, v in group.items() if k != "params"}, **flags, "params": group["params"]})
    rebuilt = cls(groups, **defaults)
    state = optimizer.state_dict()
    # load_state_dict takes each group's options from the saved dict, so the saved
    # groups must carry the new flags or the old implementation would come back.
    state = {**state, "param_groups": [{**copy.copy(g), **flags} for g in state["param_groups"]]}
    rebuilt.load_state_dict(state)
    _check_same_groups(optimizer, rebuilt)
    return rebuilt


def _check_same_groups(old: torch.optim.Optimizer, new: torch.optim.Optimizer) -> None:
    # A constructor that silently rewrites a hyperparameter would change training: refuse.
    for index, (a, b) in enumerate(zip(old.param_groups, new.param_groups, strict=True)):
        if [id(p) for p in a["params"]] != [id(p) for p in b["params"]]:
            raise RuntimeError(f"rebuilt optimizer's group {index} holds different parameters")
        for key, value in a.items():
            if key in ("params", "foreach", "fused"):
                continue
            if not _same(value, b.get(key)):
                raise RuntimeError(
                    f"rebuilt optimizer's group {index} changed {key}: {value!r} -> {b.get(key)!r}"
                )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and bool(torch.equal(a, b))
    return a == b


# -- the descriptor ---------------------------------------------------------------------

def _resolve(ctx: ResolveContext) -> Resolution:
    if ctx.optimizer is None:
        implementation, reason = "default", "no optimizer given"
    else:
        implementation, reason = resolve_optimizer(ctx.config.optimizer.implementation, ctx.optimizer,
                                                   device=ctx.device)
    return Resolution(Overlay.of(OptimizerConfig, implementation=implementation),
                      {"optimizer.implementation": reason})


def _apply(prep: Preparation) -> None:
    # Last: fused kernels need the parameters on their device. The Booster's step
    # (torchboost.step) then drives the optimizer left in prep.optimizer.
    if prep.optimizer is None:
        return
    inner = apply_optimizer_implementation(prep.optimizer, prep.config.optimizer.implementation)
    if prep.scheduler is not None and inner is not prep.optimizer:
        prep.scheduler.optimizer = inner  # the schedule must drive the rebuilt optimizer
    prep.optimizer = inner


def _nocode_first_step(values: dict[str, Any], optimizer: torch.optim.Optimizer, notes: list[str]) -> None:
    implementation = values.get("implementation", "default")
    if implementation in ("default", "auto"):
        return
    try:
        switched = switch_implementation_in_place(optimizer, implementation)
    except ValueError as exc:  # this optimizer has no such kernel: leave it as the script built it
        notes.append(f"{type(optimizer).__name__} kept as built: {exc}")
        return
    if switched:
        notes.append(f"{type(optimizer).__name__} switched to {implementation}")


def _propose(incumbent: Overlay, ctx: TuneContext) -> list[Overlay]:
    if not ctx.has_optimizer:
        return []
    return [Overlay.of(OptimizerConfig, implementation="fused"), Overlay.of(OptimizerConfig, implementation="foreach")]


def _fused_alone(change: Overlay) -> bool:
    # The fused kernel is the quick switch's (group flags read at every step); foreach has none.
    return change == Overlay.of(OptimizerConfig, implementation="fused")


def _spell(section: OptimizerConfig) -> FrameworkSpelling:
    if section.implementation not in ("fused", "foreach"):
        return FrameworkSpelling()
    code = (f"optimizer = torch.optim.AdamW(model.parameters(), ..., {section.implementation}=True)"
            "  # Adam, SGD, ... take it too",)
    # The Trainer builds AdamW itself; its fused kernel has a name of its own.
    transformers = {"optim": "adamw_torch_fused"} if section.implementation == "fused" else {}
    return FrameworkSpelling(transformers=transformers, code=code)


# -- its diagnosis ------------------------------------------------------------------------

_FUSED_OVER_FOREACH = 1.5  # fused optimizer vs the foreach one (assumed)
_FUSED_OVER_LOOP = 3.0  # fused optimizer vs the per-parameter loop (assumed)


def optimizer_fused(facts: Facts, *, optimizer_pct: float = 5.0) -> Finding | None:
    """The optimizer step takes at least ``optimizer_pct`` percent of the step and the optimizer
    supports ``fused=True`` on this device but does not use it."""
    opt, v = facts.optimizer, view(facts)
    if opt is None or not opt.supports_fused or opt.fused or v.share["optimizer"] * 100 < optimizer_pct:
        return None
    # foreach=None means the default: foreach on CUDA, the per-parameter loop on CPU.
    foreach = opt.foreach if opt.foreach is not None else v.device == "cuda"
    factor = _FUSED_OVER_FOREACH if foreach else _FUSED_OVER_LOOP
    f = v.share["optimizer"]
    speedup = amdahl(f, factor)
    name = opt.class_name or "AdamW"
    return Finding(
        id="optimizer.fused",
        title=f"{name} steps {'with foreach kernels' if foreach else 'parameter by parameter'} "
              f"({f * 100:.0f}% of the step); use the fused implementation",
        evidence={
            "optimizer_pct": r(f * 100, 1),
            "optimizer_ms_per_step": r(v.ms["optimizer"]),
            "optimizer": name,
            "implementation": "foreach" if foreach else "for-loop",
        },
        fix=Overlay.of(OptimizerConfig, implementation="fused"),
        expected_speedup=speedup,
        formula=f"1 / (1 - f + f / s) = {speedup:.3f}; f = {f:.3f} optimizer share, "
                f"s = {factor} fused over {'foreach' if foreach else 'for-loop'} (assumed)",
        notes=["Same update maths; fused kernels round slightly differently at the last bit."],
    )


def _place_steps(optimizer: torch.optim.Optimizer, groups: list[dict[str, Any]], *, on_device: bool) -> None:
    """Move each parameter's ``state["step"]`` tensor where the implementation about to step
    needs it: beside its parameter (``on_device``: the fused kernel reads it there, as a
    float32 tensor), or on the CPU, where torch's for-loop and foreach Adam keep it when
    neither ``capturable`` nor ``fused`` is set. Steps that are already there stay put; the
    ones that come back from a device do so in one copy (one wait for the device)."""
    moving: list[tuple[dict[str, Any], torch.Tensor]] = []
    for group in groups:
        if not on_device and group.get("capturable"):
            continue  # a capturable optimizer keeps its steps on the device itself
        for param in group["params"]:
            state = optimizer.state.get(param)
            step = state.get("step") if state else None
            if not isinstance(step, torch.Tensor):
                continue
            if on_device and (step.device != param.device or step.dtype != torch.float32):
                state["step"] = step.to(device=param.device, dtype=torch.float32)
            elif not on_device and step.device.type != "cpu":
                moving.append((state, step))
    if moving:
        # One stacked copy: a tensor per parameter would wait for the device once each.
        for (state, _), value in zip(moving, torch.stack([s.float() for _, s in moving]).cpu().unbind()):
            state["step"] = value.clone()


def quick_switch(ctx: ProbeContext) -> QuickSwitch | None:
    """The script's optimizer stepping with its fused kernel, as a switch the doctor turns on
    for a step and off again: each group's ``foreach``/``fused`` flags are set, then put back
    as they were (torch reads them at every step). The state carries over both ways but one
    tensor: Adam's and Adagrad's ``step``, which their for-loop and foreach kernels keep on the
    CPU and the fused kernel needs beside the parameters (on a GPU, a fused step on a CPU
    ``step`` fails inside the script's ``optimizer.step()``): ``on`` moves it there, ``off``
    back. None where it has no fused kernel here or already uses it."""
    optimizer = ctx.optimizer
    if optimizer is None or current_implementation(optimizer) == "fused":
        return None
    devices = {p.device.type for g in optimizer.param_groups for p in g["params"]}
    if not devices or not devices <= FUSED_DEVICES.get(type(optimizer), frozenset()) or _blocker(optimizer):
        return None
    flags = _flags(optimizer, "fused")
    groups = [*optimizer.param_groups]
    saved = [{k: g[k] for k in flags if k in g} for g in groups]

    def on() -> None:
        _place_steps(optimizer, groups, on_device=True)
        for group in groups:
            group.update(flags)

    def off() -> None:
        for group, before in zip(groups, saved):
            for key in flags:
                group.pop(key, None)
            group.update(before)
        _place_steps(optimizer, groups, on_device=False)

    return QuickSwitch("optimizer.fused", f"fused {type(optimizer).__name__}", on=on, off=off,
                       setting=Overlay.of(OptimizerConfig, implementation="fused").to_dict())


TECHNIQUE = Technique(
    name="optimizer",
    title="optimizer implementation",
    after=('accumulation',),
    placed="last: the optimizer is rebuilt for the final parameters, and its step wraps precision's scaler and accumulation's window",
    section=OptimizerConfig,
    resolve=_resolve,
    apply=_apply,
    nocode=NoCode(at_first_step=_nocode_first_step),
    levers=(Lever("optimizer", "fused/foreach optimizer", Parity.EXACT, _propose, ("optimizer.fused",),
                  priority=60, switchable=_fused_alone),),
    spell=_spell,
    rules=(Rule("optimizer.fused", optimizer_fused),),
    quick_probe=quick_switch,
)
