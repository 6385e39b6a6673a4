"""The training step, top to bottom: each call of the Booster's loop, in the order it runs.

::

    for x, y in loader:
        with booster.accumulate(model):     # TrainStep.micro_step: no_sync before a window's end
            with booster.autocast():        # TrainStep.autocast: the precision's autocast
                loss = criterion(model(x), y)
            booster.backward(loss)          # TrainStep.backward: weigh, scale, backward, divide
            optimizer.step()                # TrainStep.step: unscale, skip on inf/NaN, update scale
            optimizer.zero_grad()           # TrainStep.zero_grad: not mid-window

The techniques keep their own maths: the precision policy says which autocast to enter
and owns the loss scaler; the accumulator weighs each micro-step's loss, counts the
window and divides its gradient. What runs when is written here, once. A technique
switched off is a null object chosen at ``prepare`` (but in fp16 the loss scaler is one
that scales by 1 and steps as is; no accumulation is a window of one micro-step), so the
step has no per-technique branch. Each host-device synchronisation is marked ``# sync:``.

:class:`TrainStep` works without the Booster too: ``TrainStep(make_precision("fp16",
"cuda"), Accumulator(4), optimizer)``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Protocol

import torch
from torch import nn

__all__ = ["Scaler", "StepPrecision", "StepWindow", "TrainStep", "scaled_step"]


# -- what the step needs of the techniques --------------------------------------------------


class Scaler(Protocol):
    """The loss scaler's part of ``torch.amp.GradScaler``: a real one in fp16, else a null one."""

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss times the scale."""

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale (once per step)."""

    def step(self, optimizer: torch.optim.Optimizer) -> Any:
        """``optimizer.step()`` unless the gradients hold inf/NaN."""

    def update(self) -> None:
        """Grow or back off the scale after a step."""

    def get_scale(self) -> float:
        """The current scale (1.0 without scaling)."""


class StepPrecision(Protocol):
    """What the step needs of a precision policy (:mod:`torchboost.techniques.precision.precision_policy`)."""

    loss_scaler: Scaler
    """fp16's ``GradScaler``; a null scaler (scale 1, the optimizer stepped as is) otherwise."""

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for the forward pass and loss."""

    def step_closure(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any]) -> Any:
        """``optimizer.step(closure)``, or a refusal with the workaround."""


class StepWindow(Protocol):
    """What the step needs of an accumulation window (:class:`torchboost.techniques.accumulation.Accumulator`)."""

    at_boundary: bool
    """No micro-step waits for an optimizer step."""
    mid_window: bool
    """Micro-steps were back-propagated but the window has not ended: no step, no zero_grad."""

    def next_micro_step(self, num_samples: int | None) -> tuple[float | None, bool]:
        """The next micro-step's ``(weight, last)``: its share of a full micro-batch, and whether it ends the window."""

    def open(self, model: nn.Module | None, weight: float | None, last: bool) -> None:
        """Start a micro-step (refused while a finished window waits for its step)."""

    def close(self) -> None:
        """End the micro-step :meth:`open` started."""

    def weigh(self, loss: torch.Tensor, num_items: Any) -> Any:
        """This micro-step's share of the window: ``.loss`` to back-propagate and ``.model``."""

    def count(self, share: Any) -> bool:
        """Count a back-propagated share; True when the window's gradient must now be divided."""

    def normalise(self, params: list[torch.Tensor]) -> None:
        """Divide the finished window's gradients by its total."""

    def refuse_closure(self) -> None:
        """Raise when the window cannot step with a closure."""

    def reset(self) -> None:
        """Forget the open window."""


# -- the step -------------------------------------------------------------------------------


def scaled_step(scaler: Scaler, optimizer: torch.optim.Optimizer) -> bool:
    """Step ``optimizer`` through ``scaler``; False when the step was skipped for inf/NaN gradients.

    The fp16 scaler backs off (lowers the scale) exactly when it found inf/NaN and skipped
    the step, and otherwise keeps or grows it, so the scale before and after tells which.
    """
    # sync: get_scale() reads the scale to the host (fp16 only; the null scaler says 1.0).
    # Once per optimizer step, and scaler.step syncs on its inf check anyway.
    before = scaler.get_scale()
    scaler.step(optimizer)  # fp16: unscale unless done, check inf/NaN (sync), step or skip
    scaler.update()
    return scaler.get_scale() >= before  # sync: the new scale (fp16 only)


class TrainStep:
    """One training step's calls, in order: micro-step, autocast, backward, step, zero_grad.

    Args:
        precision: the precision policy (autocast and the loss scaler).
        accumulator: the accumulation window (a window of one micro-step when off).
        optimizer: the optimizer the step drives; its parameters are the ones divided when
            a micro-step names no model. None when ``prepare`` got no optimizer.
    """

    def __init__(self, precision: StepPrecision, accumulator: StepWindow,
                 optimizer: torch.optim.Optimizer | None = None) -> None:
        self.precision = precision
        self.accumulator = accumulator
        self.optimizer = optimizer
        self.real_steps = 0
        """Optimizer steps that updated the weights."""
        self.skipped_steps = 0
        """Steps skipped because fp16 gradients overflowed."""
        self.step_was_skipped = False
        """Whether the last ``step()`` was skipped."""

    @property
    def at_boundary(self) -> bool:
        """No accumulation window is open: the last micro-step stepped."""
        return self.accumulator.at_boundary

    # 1. the micro-step ------------------------------------------------------------------

    @contextlib.contextmanager
    def micro_step(self, model: nn.Module | None = None, *, num_samples: int | None = None) -> Iterator[None]:
        """Context for one micro-step; ``num_samples`` defaults to the prepared loader's batch."""
        weight, last = self.accumulator.next_micro_step(num_samples)
        with self.window(model, weight, last):
            yield

    @contextlib.contextmanager
    def window(self, model: nn.Module | None, weight: float | None, last: bool) -> Iterator[None]:
        """A micro-step of ``weight`` (samples / a full micro-batch) that ends its window when ``last``."""
        self.accumulator.open(model, weight, last)
        # Before the window's end a DDP model skips its gradient all-reduce; the last
        # micro-step's backward all-reduces the whole window's gradient.
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        try:
            with sync:
                yield
        finally:
            self.accumulator.close()

    # 2. the forward -----------------------------------------------------------------------

    def autocast(self) -> contextlib.AbstractContextManager:
        """Context for forward and loss: the precision's autocast (nothing in fp32/tf32)."""
        return self.precision.autocast()

    # 3. the backward ----------------------------------------------------------------------

    def backward(self, loss: torch.Tensor, *, num_items: Any = None, **kwargs: Any) -> None:
        """Back-propagate one micro-step's ``loss`` (a mean; with ``num_items``, a sum over them)."""
        share = self.accumulator.weigh(loss, num_items)  # the loss, or loss x its micro-batch's weight
        self.precision.loss_scaler.scale(share.loss).backward(**kwargs)  # fp16: times the loss scale
        # sync (num_items a tensor only): count() reads it to the host, after the backward.
        if self.accumulator.count(share):  # the window's last backward, and a total other than 1
            # sync (DDP only): the window's total goes to the device and is all-reduced,
            # one scalar per window; the division itself stays on the device.
            self.accumulator.normalise(self._params(share.model))

    def _params(self, model: nn.Module | None) -> list[torch.Tensor]:
        if model is not None:
            return list(model.parameters())
        if self.optimizer is not None:
            return [p for group in self.optimizer.param_groups for p in group["params"]]
        raise RuntimeError("no model to normalise the gradients of: pass the model to accumulate(model)")

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale the gradients in place before clipping them (fp16); a no-op otherwise."""
        self.precision.loss_scaler.unscale_(optimizer)  # fp16: checks inf/NaN on the device, no sync

    # 4. the optimizer step ----------------------------------------------------------------

    def step(self, optimizer: torch.optim.Optimizer) -> bool | None:
        """At a window's end step ``optimizer``: True, or False when skipped for fp16
        overflow. Mid-window nothing happens (None: not a step at all)."""
        self.step_was_skipped = False
        if self.accumulator.mid_window:
            return None
        stepped = scaled_step(self.precision.loss_scaler, optimizer)
        self.accumulator.reset()
        self.step_was_skipped = not stepped
        if stepped:
            self.real_steps += 1
        else:
            self.skipped_steps += 1
        return stepped

    def step_closure(self, optimizer: torch.optim.Optimizer, closure: Callable[[], Any]) -> Any:
        """``optimizer.step(closure)`` (LBFGS, Lightning): the closure's loss.

        Refused, with the workaround, under accumulation (the optimizer re-runs the closure
        on one batch) and in fp16 (its scaler must unscale between backward and step).
        """
        self.accumulator.refuse_closure()
        # The closure runs the forward and this object's backward as often as the
        # optimizer needs; whatever it syncs (LBFGS reads the loss) is the optimizer's.
        loss = self.precision.step_closure(optimizer, closure)
        self.accumulator.reset()
        self.step_was_skipped = False
        self.real_steps += 1
        return loss

    # 5. zero_grad -------------------------------------------------------------------------

    def zero_grad(self, optimizer: torch.optim.Optimizer, set_to_none: bool = True) -> None:
        """Clear the gradients, except mid-window, where they are still accumulating."""
        if not self.accumulator.mid_window:
            optimizer.zero_grad(set_to_none=set_to_none)

    # -- outside the loop ---------------------------------------------------------------------

    def abandon(self) -> None:
        """Forget a partial window (its micro-batch ran out of memory; it is re-run)."""
        self.accumulator.reset()

    def step_counts(self) -> dict[str, int]:
        """``{"real": ..., "skipped": ...}``: steps that updated the weights and fp16 overflows."""
        return {"real": self.real_steps, "skipped": self.skipped_steps}

    def restore_step_counts(self, counts: dict[str, int]) -> None:
        """Set the step counts from :meth:`step_counts`'s output (a restored checkpoint)."""
        self.real_steps = int(counts["real"])
        self.skipped_steps = int(counts["skipped"])
