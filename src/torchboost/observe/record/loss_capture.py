"""The loss of each step, as the script computed it, kept as tensors until the facts are written.

The loss is the scalar ``backward`` was called on, detached and copied (a CUDA graph's
replay overwrites the tensor it returned last time); under a ``GradScaler`` it is divided
by the scale so the numbers are the script's own. Tensors are converted to floats
only when the facts are built: converting one per step would sync the device per step.
"""

from __future__ import annotations

from typing import Any

import torch

from torchboost.observe.record.phases import RECORDED, WARMUP

__all__ = ["LossCapture"]


class LossCapture:
    """The pending loss of the step in flight, and the losses of closed steps by kind."""

    def __init__(self) -> None:
        self.scaler: Any = None
        """The ``GradScaler`` driving the primary optimizer, when the script uses one."""
        self._pending: torch.Tensor | None = None
        self.last: torch.Tensor | None = None
        """The loss of the step closed last, whatever its kind (the quick probes read it)."""
        self._recorded: list[torch.Tensor] = []
        self._values: list[float] = []
        self._warmup: list[torch.Tensor] = []
        self._last: torch.Tensor | None = None  # the last loss closed, kept or not
        self.steps: list[int] = []
        """The step index of each loss kept, warm-up's then the recorded ones'
        (:attr:`~torchboost.evidence.observed.Facts.loss_steps`)."""

    def backward_on(self, tensor: Any) -> None:
        """``backward`` was called on ``tensor``; a scalar is taken as the step's loss."""
        if isinstance(tensor, torch.Tensor) and tensor.numel() == 1:
            loss = tensor.detach()
            scale = getattr(self.scaler, "_scale", None)  # GradScaler multiplies the loss
            # A copy either way, never the tensor itself: under CUDA graphs (compile's
            # reduce-overhead) the loss is the graph's static output, which the next replay
            # overwrites before the losses are read. One scalar, on the device: no sync.
            self._pending = loss / scale if isinstance(scale, torch.Tensor) else loss.clone()

    def close_step(self, kind: str | None, index: int) -> None:
        """Keep the step's loss with the steps of ``kind`` (see :meth:`StepTiming.close_step`);
        ``index``: the step's, counted from 0."""
        pending = self._pending
        self.last = pending  # the quick probes read the loss of the step closed last
        if pending is not None:
            self._last = pending
            if kind == RECORDED:
                self._recorded.append(pending)
            elif kind == WARMUP:
                # Warm-up losses let a tuning trial compare runs from step 0.
                self._warmup.append(pending)
            if kind in (RECORDED, WARMUP):
                self.steps.append(index)
        self._pending = None

    def restart(self) -> None:
        """Step counting restarts (an optimizer was adopted): the losses of closed steps go,
        but the last one, the first optimizer step's (its backward came before the step), is
        step 0's, kept as the first warm-up loss."""
        self._recorded.clear()
        self._values.clear()  # converted already when facts were built before (at warm-up's end)
        self._warmup[:] = [self._last] if self._last is not None else []
        self.steps[:] = [0] if self._last is not None else []

    def values(self) -> list[float]:
        """The recorded steps' losses as floats (converts the pending tensors: may sync)."""
        if self._recorded:
            self._values.extend(float(t) for t in self._recorded)
            self._recorded.clear()
        return list(self._values)

    def warmup_values(self) -> list[float]:
        """The warm-up steps' losses as floats (may sync)."""
        return [float(t) for t in self._warmup]
