"""Apply torchboost settings to an unmodified training script, from inside its process.

Used by ``torchboost tune`` trials and ``torchboost run``. Settings are dotted
``torchboost.toml`` keys (``{"loader.num_workers": 2, "cpu.threads": 1}``). What each
one touches, and when:

* ``cpu.threads`` and ``precision.mode = "tf32"``: process-wide switches, set at install;
* ``loader.*``: ``DataLoader.__init__`` is wrapped so loaders over map-style datasets are
  built with the new values (an IterableDataset is left alone: more workers would each
  yield the whole unsharded stream); a sharing strategy wraps the ``worker_init_fn``;
* ``precision.mode = "bf16"`` and ``compile.mode``: the root module (the first module
  with trainable parameters called, with gradients on, from outside any other forward)
  gets its ``forward`` compiled and/or run under
  bf16 autocast with floating outputs cast back to fp32 for the loss. It takes effect
  from the second forward call, the first one being already under way;
* ``optimizer.implementation``: before an optimizer's first step (its state still
  empty), its param groups are switched to the fused or foreach kernels in place.

When the script itself prepares a :class:`torchboost.Booster`, the Booster applies the
configuration (it reads the trial's settings, see :mod:`torchboost.trial`) and the
model and optimizer levers here stand down, so nothing is applied twice.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from typing import Any, Callable

import torch
import torch.optim.optimizer as _optim
import torch.utils.data.dataloader as _dl
from torch import nn
from torch.nn.modules import module as _nn_module
from torch.utils.data import IterableDataset

from torchboost import trial as _trial
from torchboost.techniques.compile import apply_compile
from torchboost.techniques.cpu import apply_threads
from torchboost.techniques.optimizer import switch_implementation_in_place
from torchboost.techniques.worker_ipc import with_sharing

__all__ = ["Applier", "SUPPORTED_SETTINGS", "NOCODE_UNSUPPORTED", "nocode_settings"]

SUPPORTED_SETTINGS = (
    "cpu.threads", "precision.mode", "compile.mode", "compile.scope", "loader.num_workers",
    "loader.pin_memory", "loader.persistent_workers", "loader.prefetch_factor", "loader.sharing_strategy",
    "optimizer.implementation",
)
"""Settings this module can apply to a script that does not use the Booster."""

NOCODE_UNSUPPORTED = {
    "precision.mode=fp16": "fp16 needs a gradient scaler in the loop",
    "memory.channels_last": "the inputs must be converted too",
    "accumulation": "accumulation changes the loop",
}
"""What only a Booster in the training loop can apply, and why."""


def nocode_settings(settings: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Split settings into what can be applied from outside and notes on the rest."""
    applicable: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in settings.items():
        why = NOCODE_UNSUPPORTED.get(f"{key}={value}") or NOCODE_UNSUPPORTED.get(key) \
            or NOCODE_UNSUPPORTED.get(key.split(".", 1)[0])
        if why is None and key not in SUPPORTED_SETTINGS:
            why = "not a setting torchboost applies from outside"
        if why is None:
            applicable[key] = value
        else:
            notes.append(f"{key} = {value!r} needs the Booster in the training loop ({why}); not applied")
    return applicable, notes

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16}


def _to_fp32(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.dtype != torch.float32 else value
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_to_fp32(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_fp32(v) for k, v in value.items()}
    return value


def _trainable(module: nn.Module) -> bool:
    return any(p.requires_grad for p in module.parameters())


class Applier:
    """Installs the patches for ``settings``; ``uninstall`` restores everything."""

    def __init__(self, settings: dict[str, Any]):
        _, refused = nocode_settings(settings)
        if refused:
            raise ValueError("; ".join(refused))
        self.settings = dict(settings)
        self._originals: list[tuple[Any, str, Any]] = []
        self._handles: list[Any] = []
        self._forward_handles: list[Any] = []
        self._root: weakref.ref | None = None
        self._depth = 0
        self._boosters_before = _trial.boosters_prepared()
        self.notes: list[str] = []
        """What was applied, in words, for the trial's record."""

    # -- install / uninstall -----------------------------------------------------------

    def install(self) -> "Applier":
        """Apply process-wide settings now and patch for the rest."""
        s = self.settings
        if "cpu.threads" in s:
            apply_threads(int(s["cpu.threads"]))
            self.notes.append(f"intra-op threads set to {s['cpu.threads']}")
        if s.get("precision.mode") == "tf32":
            torch.set_float32_matmul_precision("high")
            torch.backends.cudnn.allow_tf32 = True
            self.notes.append("TF32 matmuls on")
        if any(k.startswith("loader.") for k in s):
            self._patch(_dl.DataLoader, "__init__", self._wrap_loader_init)
        if s.get("precision.mode") in _AUTOCAST_DTYPES or s.get("compile.mode", "off") != "off":
            # Global hooks send every module call through PyTorch's slower hook path: they
            # are removed as soon as the root module has been found and boosted.
            self._forward_handles = [
                _nn_module.register_module_forward_pre_hook(self._on_forward_pre),
                _nn_module.register_module_forward_hook(self._on_forward_post, always_call=True),
            ]
        if s.get("optimizer.implementation", "default") not in ("default", "auto"):
            self._handles.append(_optim.register_optimizer_step_pre_hook(self._on_first_step))
        return self

    def uninstall(self) -> None:
        """Remove every patch and hook (the model keeps what was applied to it)."""
        self._remove_forward_hooks()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name)
        self._originals.append((owner, name, original))
        setattr(owner, name, make(original))

    def _booster_in_charge(self) -> bool:
        return _trial.boosters_prepared() > self._boosters_before

    # -- loader --------------------------------------------------------------------------

    def _wrap_loader_init(self, original: Callable) -> Callable:
        signature = inspect.signature(original)
        wanted = {k.split(".", 1)[1]: v for k, v in self.settings.items() if k.startswith("loader.")}
        sharing = wanted.pop("sharing_strategy", None)

        @functools.wraps(original)
        def __init__(loader_self: Any, *args: Any, **kwargs: Any) -> None:
            bound = signature.bind(loader_self, *args, **kwargs)
            dataset = bound.arguments.get("dataset")
            if not isinstance(dataset, IterableDataset):
                arguments = dict(bound.arguments)
                arguments.pop("self", None)
                arguments.update(wanted)
                workers = int(arguments.get("num_workers", 0) or 0)
                if workers == 0:
                    arguments["persistent_workers"] = False
                    arguments["prefetch_factor"] = None
                elif sharing is not None:
                    arguments["worker_init_fn"] = with_sharing(arguments.get("worker_init_fn"), sharing)
                return original(loader_self, **arguments)
            return original(loader_self, *args, **kwargs)

        return __init__

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

    def _on_forward_post(self, module: nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling():
            return
        self._depth -= 1  # always_call: also after a forward that raised
        root = self._root() if self._root is not None else None
        if self._depth == 0 and root is module and "forward" not in module.__dict__:
            self._boost_root(module)
            self._remove_forward_hooks()

    def _boost_root(self, module: nn.Module) -> None:
        s = self.settings
        if s.get("compile.mode", "off") != "off":
            apply_compile(module, mode=s["compile.mode"], scope=s.get("compile.scope", "model"))
            self.notes.append(f"compiled {type(module).__name__} ({s['compile.mode']})")
        dtype = _AUTOCAST_DTYPES.get(s.get("precision.mode", ""))
        if dtype is not None:
            inner = module.forward
            device_type = next((p.device.type for p in module.parameters()), "cpu")

            @functools.wraps(inner)
            def forward(*args: Any, **kwargs: Any) -> Any:
                with torch.autocast(device_type, dtype=dtype):
                    out = inner(*args, **kwargs)
                return _to_fp32(out)

            module.forward = forward
            self.notes.append(f"bf16 autocast around {type(module).__name__}.forward")

    # -- optimizer -----------------------------------------------------------------------

    def _on_first_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._booster_in_charge() or optimizer.state:
            return
        implementation = self.settings["optimizer.implementation"]
        try:
            switched = switch_implementation_in_place(optimizer, implementation)
        except ValueError as exc:  # this optimizer has no such kernel: leave it as the script built it
            self.notes.append(f"{type(optimizer).__name__} kept as built: {exc}")
            return
        if switched:
            self.notes.append(f"{type(optimizer).__name__} switched to {implementation}")
