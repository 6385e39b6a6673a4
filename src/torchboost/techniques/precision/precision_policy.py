"""The precision policies: one small object per mode, chosen once, so the step has no ``if``.

* ``fp32``: plain PyTorch; touches nothing.
* ``tf32``: fp32 tensors, but CUDA matmuls and convolutions use TF32 tensor cores
  (``torch.backends.cuda.matmul.fp32_precision = "tf32"`` and cuDNN's likewise; the
  ``allow_tf32`` flags on a torch before 2.9).
* ``bf16``: autocast to bfloat16. bf16 has fp32's exponent range, so it never needs a
  loss scaler and never owns one.
* ``fp16``: autocast to float16 plus a :class:`torch.amp.GradScaler`; a step whose
  gradients hold inf/NaN is skipped and the scale is halved.

Which mode ``"auto"`` picks is :mod:`torchboost.techniques.precision`'s to say.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from torchboost import _fp32_precision
from torchboost.config import ConfigError
from torchboost.step import scaled_step

__all__ = ["AutocastPrecision", "Fp16Precision", "NoScaler", "Precision", "Tf32Precision", "make_precision"]

_CONCRETE = ("fp32", "tf32", "bf16", "fp16")
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class NoScaler:
    """The loss scaler of every mode but fp16, a null object: scale 1, the optimizer stepped as is.

    Not a disabled ``GradScaler``: the observer takes a GradScaler driving the step for
    the script's own fp16 loss scaling.
    """

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss`` itself."""
        return loss

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Nothing: the gradients were never scaled."""

    def step(self, optimizer: torch.optim.Optimizer) -> Any:
        """``optimizer.step()``."""
        return optimizer.step()

    def update(self) -> None:
        """Nothing: the scale stays 1."""

    def get_scale(self) -> float:
        """1.0."""
        return 1.0


_NO_SCALER = NoScaler()


class Precision:
    """fp32: the null object. Every method does exactly what plain PyTorch does.

    Subclasses change only what their mode needs (the autocast to enter, the scaler);
    the training step (:mod:`torchboost.step`) calls the same methods whatever the mode.
    """

    mode = "fp32"
    loss_scaler: Any = _NO_SCALER
    """What the step scales the loss and steps through: fp16's ``GradScaler``, else
    :class:`NoScaler` (only fp16 owns a ``scaler``)."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        """Device type the model runs on: "cpu", "cuda", "mps", ..."""

    def setup(self) -> None:
        """Set the global switches this mode needs. fp32 touches nothing."""

    def teardown(self) -> None:
        """Restore what :meth:`setup` changed. fp32 changed nothing."""

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for the forward pass and loss; a no-op for fp32 and tf32."""
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``, scaled when the mode needs it."""
        self.loss_scaler.scale(loss).backward(**kwargs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients back to their true size before clipping; no-op unless fp16."""
        self.loss_scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step the optimizer. Returns False when the step was skipped (fp16 overflow)."""
        return scaled_step(self.loss_scaler, optimizer)

    def step_closure(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any]) -> Any:
        """``optimizer.step(closure)``, returning the closure's loss."""
        return optimizer.step(closure)

    def state_dict(self) -> dict:
        """What a checkpoint must keep to resume this mode: the scaler for fp16, else {}."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        if state:
            raise ValueError(
                f"precision {self.mode!r} keeps no state but got keys {sorted(state)}; "
                "was this checkpoint saved with precision fp16?"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mode={self.mode!r}, device_type={self.device_type!r})"


class Tf32Precision(Precision):
    """tf32: fp32 tensors, TF32 tensor cores for CUDA matmuls and convolutions."""

    mode = "tf32"

    def __init__(self, device_type: str) -> None:
        super().__init__(device_type)
        self._saved: _fp32_precision.Saved | None = None

    def setup(self) -> None:
        """Allow TF32 in cuBLAS matmuls and cuDNN convolutions (and RNNs), through the
        per-library switches where torch has them (:mod:`torchboost._fp32_precision`); what
        was there is remembered for :meth:`teardown`."""
        saved = _fp32_precision.set_tf32(True)
        if self._saved is None:
            self._saved = saved

    def teardown(self) -> None:
        """Put back exactly the switches found by the first :meth:`setup`."""
        if self._saved is not None:
            self._saved.restore()
            self._saved = None


class AutocastPrecision(Precision):
    """bf16 (or any autocast dtype that needs no scaler): autocast in the forward pass."""

    def __init__(self, device_type: str, mode: str = "bf16") -> None:
        super().__init__(device_type)
        self.mode = mode
        self.dtype = _DTYPES[mode]
        """The autocast dtype."""

    def autocast(self) -> contextlib.AbstractContextManager:
        """``torch.autocast(device_type, dtype)``."""
        return torch.autocast(self.device_type, dtype=self.dtype)


class Fp16Precision(AutocastPrecision):
    """fp16: autocast to float16 and a GradScaler that skips steps with inf/NaN gradients."""

    def __init__(self, device_type: str) -> None:
        super().__init__(device_type, "fp16")
        # Backward of loss * scale, so small fp16 gradients do not flush to zero; one
        # optimizer per scaler (``update`` follows every step).
        self.scaler = torch.amp.GradScaler(device_type)
        """The loss scaler (``torch.amp.GradScaler``)."""
        self.loss_scaler = self.scaler

    def step_closure(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any]) -> Any:
        """Refused: a scaler must unscale between the closure's backward and the step,
        which a closure re-run by the optimizer does not allow (torch's own
        ``GradScaler.step`` refuses closures too)."""
        raise NotImplementedError(
            "precision fp16 cannot step with a closure: its GradScaler must unscale between "
            "backward and step (torch.amp.GradScaler refuses closures too). Use precision = "
            '"bf16", or call loss = closure() yourself and then optimizer.step()'
        )

    def state_dict(self) -> dict:
        """The scaler's state (scale, growth tracker, factors)."""
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Restore the scaler's state."""
        self.scaler.load_state_dict(state)


def make_precision(mode: str, device_type: str) -> Precision:
    """Build the precision object for a concrete ``mode`` on ``device_type``.

    Raises :class:`~torchboost.config.ConfigError` for combinations that cannot run:
    ``"auto"`` (resolve it first), tf32 off CUDA, autocast on a device type torch has
    no autocast for.
    """
    if mode not in _CONCRETE:
        hint = "; resolve it first with resolve_precision()" if mode == "auto" else ""
        raise ConfigError(
            f"precision.mode: expected one of {', '.join(_CONCRETE)}; got {mode!r}{hint}"
        )
    if mode == "fp32":
        return Precision(device_type)
    if mode == "tf32":
        if device_type != "cuda":
            raise ConfigError(
                f'precision.mode "tf32" needs a CUDA GPU (Ampere or newer); the model is on '
                f'{device_type!r}. Use "fp32", or "auto" to pick for this device.'
            )
        return Tf32Precision(device_type)
    if not _autocast_available(device_type):
        raise ConfigError(
            f'precision.mode "{mode}": torch has no autocast for device type {device_type!r}; '
            'use "fp32".'
        )
    if mode == "fp16":
        return Fp16Precision(device_type)
    return AutocastPrecision(device_type, "bf16")


def _autocast_available(device_type: str) -> bool:
    try:
        return torch.amp.is_autocast_available(device_type)
    except RuntimeError:  # not a device type torch knows at all
        return False
