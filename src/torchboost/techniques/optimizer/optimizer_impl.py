"""Optimizer implementations: rebuild a torch optimizer with its foreach or fused kernels.

torch's built-in optimizers have up to three implementations of the same update: a
per-parameter for-loop ("default" here, torch's choice on CPU), "foreach" (one kernel
launch per group of tensors; fast on CUDA, a plain loop on CPU) and "fused" (the whole
update in one kernel per device and dtype; Adam, AdamW, SGD and Adagrad, on CPU and
CUDA in torch 2.13, Adagrad's on CUDA only from 2.12). They compute the same update up to
float rounding. Whether a class's fused step runs on a device is asked of torch
(:func:`fused_kernel_on`), not of a table.

:func:`resolve_optimizer` picks one; :func:`apply_optimizer_implementation` rebuilds the
optimizer with it, keeping its parameter groups, per-group hyperparameters and state.
"""

from __future__ import annotations

import copy
import functools
import inspect
from typing import Any

import torch

__all__ = [
    "FOREACH_OPTIMIZERS",
    "FUSED_DEVICES",
    "IMPLEMENTATIONS",
    "apply_optimizer_implementation",
    "current_implementation",
    "fused_kernel_on",
    "resolve_optimizer",
    "switch_implementation_in_place",
]

IMPLEMENTATIONS = ("default", "foreach", "fused")
"""The concrete implementations; "auto" resolves to one of these."""

_O = torch.optim
FUSED_DEVICES: dict[type, frozenset[str]] = {
    _O.Adam: frozenset({"cpu", "cuda"}),
    _O.AdamW: frozenset({"cpu", "cuda"}),
    _O.SGD: frozenset({"cpu", "cuda"}),
    _O.Adagrad: frozenset({"cpu", "cuda"}),
}
"""Optimizer classes with a ``fused=`` implementation, and the device types we consider it
on (torch 2.13 also has some on mps/xpu; not chosen here until measured); whether torch
runs it there is :func:`fused_kernel_on`'s to say."""


def fused_kernel_on(cls: type, device_type: str) -> bool:
    """Whether torch steps ``cls`` (one of :data:`FUSED_DEVICES`) with ``fused=True`` on
    ``device_type``: asked of torch, once per class and device type. Where the device is
    here, a fused step of a one-element parameter on it is tried (torch before 2.12
    accepts Adagrad's ``fused=True`` on CUDA and refuses it in the first ``step()``, the
    script's own); elsewhere, what torch declares: its fused devices, less CUDA where the
    class's step refuses it (``cuda_unsupported=True``)."""
    return device_type in FUSED_DEVICES.get(cls, ()) and _torch_steps_fused(cls, device_type)


@functools.lru_cache(maxsize=None)
def _torch_steps_fused(cls: type, device_type: str) -> bool:
    if not _device_here(device_type):
        return _declared_fused(cls, device_type)
    param = torch.zeros(1, device=device_type, requires_grad=True)
    param.grad = torch.zeros_like(param)
    try:
        _step_unhooked(cls([param], lr=0.0, fused=True))
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return False
    return True


def _step_unhooked(optimizer: torch.optim.Optimizer) -> None:
    """One ``step()`` of ``optimizer`` past the optimizer step hooks: the global ones belong to
    the script (a tracker's) and to an observer counting the script's steps, and a probe's
    step is neither's. torch wraps ``step`` once per class with those hooks
    (``functools.wraps``: the wrapped step is ``__wrapped__``)."""
    step = type(optimizer).step
    inner = getattr(step, "__wrapped__", None) if getattr(step, "hooked", False) else None
    (inner or step)(optimizer)


def _device_here(device_type: str) -> bool:
    if device_type == "cpu":
        return True
    backend = torch.cuda if device_type == "cuda" else getattr(torch.backends, device_type, None)
    return bool(backend is not None and getattr(backend, "is_available", lambda: False)())


def _declared_fused(cls: type, device_type: str) -> bool:
    from torch.optim import optimizer as _optimizer

    declared = getattr(_optimizer, "_get_fused_kernels_supported_devices", lambda: ["cuda"])()
    if device_type not in declared:
        return False
    try:
        step = "".join(inspect.getsource(getattr(cls, name)) for name in ("_init_group", "step") if hasattr(cls, name))
    except (OSError, TypeError):
        return True
    return device_type != "cuda" or "cuda_unsupported=True" not in step

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
    if fused_kernel_on(cls, device_type):
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
    _check_fused_devices(optimizer, implementation)
    for group in optimizer.param_groups:
        group.update(flags)
    optimizer.defaults.update(flags)
    return True


def _check_fused_devices(optimizer: torch.optim.Optimizer, implementation: str) -> None:
    devices = {p.device.type for g in optimizer.param_groups for p in g["params"]}
    if implementation == "fused" and not all(fused_kernel_on(type(optimizer), device) for device in devices):
        raise ValueError(f"{type(optimizer).__name__} has no fused kernel on {', '.join(sorted(devices))}")


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
    _check_fused_devices(optimizer, implementation)  # a constructor takes fused=True where its step refuses it
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


