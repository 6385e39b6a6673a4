"""Gradient accumulation and automatic micro-batching, exact by construction.

A *window* is the run of micro-steps (forward + backward) between two optimizer steps.
The accumulated gradient equals the gradient of the whole window's loss:

* by default the mean over every sample in the window: each micro-step's loss (a mean
  over its micro-batch) is back-propagated times its sample count (in units of the
  loader's batch size, so a full micro-batch has weight exactly 1), and once the last
  micro-step's backward is done the gradients are divided by the window's total weight.
  Uneven micro-batches and a shorter last window are therefore right, not approximately;
* with ``num_items``: the loss passed is a *sum* (e.g. over non-padding tokens), and the
  gradients are divided by the window's total item count.

Under DDP the gradients are averaged over the W processes by DDP itself, so the divisor
is the global total over W (one scalar all-reduce per window, outside DDP's buckets).
With one micro-step per window and no ``num_items`` nothing extra happens at all, so
accumulation "off" is plain PyTorch bit for bit.

Normalising right after the last backward (not at ``optimizer.step()``) means gradient
clipping, ``unscale_`` and any inspection between backward and step see the true
gradient. In fp16 the division acts on scaled gradients; it is linear and keeps inf/NaN,
so the scaler's overflow check is unchanged.

Automatic micro-batching (``Booster.train_step``): :mod:`torchboost.techniques.microbatch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
from torch import nn

from torchboost.config import AUTO, ConfigError, IntOrWord, Overlay, check_int_or_word
from torchboost.techniques.registry import FrameworkSpelling, Preparation, ResolveContext, Resolution, Technique
from torchboost.techniques.microbatch import (
    MicroBatcher,
    MicroBatchWarning,
    batch_size_of,
    is_oom,
    split_batch,
)

__all__ = [
    "AccumulationConfig",
    "Accumulator",
    "MicroBatchWarning",
    "MicroBatcher",
    "ResolvedAccumulation",
    "Share",
    "batch_size_of",
    "is_oom",
    "resolve_accumulation",
    "split_batch",
]

# -- configuration ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AccumulationConfig:
    """Gradient accumulation and automatic micro-batching.

    Give either ``steps`` or ``effective_batch_size`` (both only when they agree): with
    the loader's batch size B and W processes, ``effective_batch_size = steps * B * W``.
    """

    section: ClassVar[str] = "accumulation"

    steps: int = 1
    """Micro-batches (loader batches) per optimizer step (>= 1)."""
    effective_batch_size: IntOrWord = "off"
    """off | samples per optimizer step over all processes (>= 1); gives ``steps`` from
    the loader's batch size, and must divide by it."""
    micro_batch_size: IntOrWord = AUTO
    """auto | batch | samples per micro-batch (>= 1) in ``Booster.train_step``. auto: the
    largest that fits memory (the whole batch first, halved on out-of-memory); batch: the
    whole batch, halved on out-of-memory."""

    def __post_init__(self) -> None:
        check_int_or_word("accumulation.steps", self.steps, 1, ())
        check_int_or_word("accumulation.effective_batch_size", self.effective_batch_size, 1, ("off",))
        check_int_or_word("accumulation.micro_batch_size", self.micro_batch_size, 1, (AUTO, "batch"))

    @classmethod
    def off(cls) -> "AccumulationConfig":
        """One micro-step per optimizer step: plain PyTorch."""
        return cls(steps=1)


@dataclass(frozen=True)
class ResolvedAccumulation:
    """Concrete accumulation settings. Plain data."""

    steps: int
    """Micro-steps per optimizer step."""
    effective_batch_size: int | str
    """Samples per optimizer step over all processes, or "off" when the batch size is unknown."""
    micro_batch_size: int | str
    """"batch" (whole batch first) or samples per micro-batch, for ``train_step``."""
    reasons: dict[str, str]
    """Why, keyed "accumulation.<field>"."""


def resolve_accumulation(
    cfg: AccumulationConfig, *, batch_size: int | None, world_size: int = 1
) -> ResolvedAccumulation:
    """Turn ``[accumulation]`` into concrete settings for a loader of ``batch_size`` samples per
    batch (None when unknown) on ``world_size`` processes.

    Raises :class:`ConfigError` when ``effective_batch_size`` does not divide by
    ``batch_size * world_size`` or disagrees with an explicit ``steps``.
    """
    per_step = batch_size * world_size if batch_size else None
    where = f"the loader's batch size {batch_size} x {world_size} process(es) = {per_step}"
    reasons: dict[str, str] = {}
    if cfg.effective_batch_size == "off":
        steps = cfg.steps
        reasons["accumulation.steps"] = "as configured"
        effective: int | str = steps * per_step if per_step else "off"
        reasons["accumulation.effective_batch_size"] = (
            f"{steps} step(s) x {where}" if per_step else "no loader batch size to derive it from"
        )
    else:
        wanted = int(cfg.effective_batch_size)
        if per_step is None:
            raise ConfigError(
                f"accumulation.effective_batch_size = {wanted} needs a DataLoader with a batch_size "
                "passed to prepare; set accumulation.steps instead"
            )
        if wanted % per_step:
            low, high = max(per_step, wanted // per_step * per_step), (wanted // per_step + 1) * per_step
            raise ConfigError(
                f"accumulation.effective_batch_size = {wanted} does not divide by {where}; "
                f"use a multiple of {per_step} (e.g. {low} or {high}) or set accumulation.steps"
            )
        steps = wanted // per_step
        if cfg.steps not in (1, steps):
            raise ConfigError(
                f"accumulation.steps = {cfg.steps} disagrees with effective_batch_size = {wanted} "
                f"({steps} steps with {where}); set only one of them"
            )
        effective = wanted
        reasons["accumulation.steps"] = f"effective_batch_size {wanted} / {where}"
        reasons["accumulation.effective_batch_size"] = "as configured"
    micro: int | str = cfg.micro_batch_size
    if micro == "auto":
        micro = "batch"
        reasons["accumulation.micro_batch_size"] = (
            "auto: train_step tries the whole batch, halving on out-of-memory until it fits"
        )
    else:
        reasons["accumulation.micro_batch_size"] = "as configured (halved on out-of-memory)"
    return ResolvedAccumulation(steps, effective, micro, reasons)


# -- the window -----------------------------------------------------------------------------


def _local_sum(total: torch.Tensor) -> torch.Tensor:
    return total


@dataclass(frozen=True)
class Share:
    """One micro-step's part of its window, from :meth:`Accumulator.weigh`. Plain data."""

    loss: torch.Tensor
    """What to back-propagate: the loss, or the loss times its micro-batch's weight."""
    model: nn.Module | None
    """Whose gradients the window's end divides (None: the optimizer's parameters)."""
    kind: str
    """"single" (steps = 1, no ``accumulate()`` block), "plain" (a window of one
    micro-step), "items" (a sum over ``num_items``) or "weighted" (a weighted mean)."""
    weight: Any
    """What it adds to the window's total: ``num_items`` (a number or a 0-d tensor), or
    samples / unit; None: nothing."""
    last: bool
    """It ends its window."""


class Accumulator:
    """Counts micro-steps into windows and normalises the gradient at each window's end.

    The order of its calls is :class:`torchboost.step.TrainStep`'s; this object holds the
    window's maths: each micro-step's weight, the count, the division.

    Args:
        steps: micro-steps per window (K >= 1).
        position: the prepared loader (anything with ``current_is_last`` and
            ``current_size``), or None; its last batch of an epoch ends the window early.
        unit: samples that count as weight 1 (the loader's batch size; 1 when unknown).
        reduce_sum: sums a 0-d tensor over processes (identity on one process).
        world_size: processes whose gradients DDP averages (W).
        device: where the count tensor lives for ``reduce_sum`` (nccl needs CUDA).
        micro_batch_size: samples per micro-batch in ``Booster.train_step``; None: the
            whole batch first.
    """

    def __init__(
        self,
        steps: int,
        *,
        position: Any = None,
        unit: int = 1,
        reduce_sum: Callable[[torch.Tensor], torch.Tensor] = _local_sum,
        world_size: int = 1,
        device: torch.device | str = "cpu",
        micro_batch_size: int | None = None,
    ) -> None:
        if steps < 1:
            raise ValueError(f"steps must be >= 1; got {steps}")
        self.steps = steps
        self.position = position
        self.unit = max(1, int(unit))
        self.micro_batch_size = micro_batch_size
        """Samples per micro-batch in ``Booster.train_step`` (None: the whole batch first)."""
        self._reduce_sum = reduce_sum
        self._world_size = world_size
        self._device = torch.device(device)
        self._accumulated = 0  # micro-steps back-propagated in the open window
        self._weight = 0.0  # samples / unit, or items, summed over the open window
        self._items_mode: bool | None = None
        self._ready = False  # the window's gradient is complete and normalised
        self._open: tuple[nn.Module | None, float | None, bool] | None = None

    @property
    def at_boundary(self) -> bool:
        """No micro-step is waiting for an optimizer step: a checkpoint may be taken."""
        return self._accumulated == 0

    @property
    def mid_window(self) -> bool:
        """Micro-steps were back-propagated but the window has not ended: no step, no zero_grad."""
        return bool(self._accumulated and not self._ready)

    def next_micro_step(self, num_samples: int | None = None) -> tuple[float | None, bool]:
        """``(weight, last)`` of the next micro-step: its samples / unit (None when unknown)
        and whether it ends the window. ``num_samples`` is the micro-batch's sample count;
        by default the prepared loader's current batch gives it."""
        if num_samples is None and self.position is not None:
            num_samples = self.position.current_size
        weight = None if num_samples is None else num_samples / self.unit
        loader_last = bool(self.position is not None and self.position.current_is_last)
        return weight, self._accumulated + 1 >= self.steps or loader_last

    def open(self, model: nn.Module | None, weight: float | None, last: bool) -> None:
        """Start a micro-step of ``weight`` on ``model``; ``last`` ends the window."""
        if self._ready:
            raise RuntimeError(
                "the previous accumulation window ended without optimizer.step(); call "
                "optimizer.step() and optimizer.zero_grad() inside every accumulate() block"
            )
        self._open = (model, weight, last)

    def close(self) -> None:
        """End the micro-step :meth:`open` started."""
        self._open = None

    def weigh(self, loss: torch.Tensor, num_items: int | float | torch.Tensor | None = None) -> Share:
        """The open micro-step's share: ``loss`` (a mean over the micro-batch; with
        ``num_items``, a sum over that many items) weighted for the window. Raises, before
        anything is back-propagated, when the call does not fit the window."""
        if self._open is None:
            if self.steps == 1:
                return Share(loss, None, "single", num_items, True)
            raise RuntimeError(
                f"accumulation.steps = {self.steps}: wrap each micro-step in "
                "`with booster.accumulate(model):` so the window's end is known"
            )
        model, weight, last = self._open
        mode = num_items is not None
        if self._items_mode is not None and mode != self._items_mode:
            raise ValueError("pass num_items to every backward of a window, or to none of them")
        if mode:
            return Share(loss, model, "items", num_items, last)
        if last and self._accumulated == 0:
            return Share(loss, model, "plain", None, last)  # a window of one micro-step: plain PyTorch
        if weight is None:
            raise ValueError(
                "the micro-batch's sample count is unknown (not from the prepared loader): "
                "pass num_samples= to accumulate(), or num_items= to backward()"
            )
        return Share(loss * weight, model, "weighted", weight, last)

    def count(self, share: Share) -> bool:
        """Count the micro-step ``share`` was back-propagated for. True when it ended the
        window and the gradient must still be divided by the total (:meth:`normalise`).
        A ``num_items`` tensor is read to the host here (a sync)."""
        if share.kind == "single":
            self._accumulated = 1
            if share.weight is None:
                self._ready = True
                return False
            self._weight, self._items_mode = float(share.weight), True  # sync: a tensor is read
            return self._to_divide()
        self._items_mode = share.kind == "items"
        if share.kind == "plain":
            self._accumulated, self._ready = 1, True
            return False
        self._weight += float(share.weight)  # sync: a num_items tensor is read to the host
        self._accumulated += 1
        return share.last and self._to_divide()

    def _to_divide(self) -> bool:
        if self._weight == 1.0 and self._world_size == 1:
            self._ready = True  # a total of one full micro-batch: nothing to divide
            return False
        return True

    def normalise(self, params: list[torch.Tensor]) -> None:
        """Divide the ended window's gradients (of ``params``) by its total."""
        grads = [p.grad for p in params if p.grad is not None]
        if self._world_size > 1:
            # DDP averaged over W processes: multiply by W / global total.
            total = self._reduce_sum(torch.tensor(self._weight, dtype=torch.float64, device=self._device))
            divisor = (total / self._world_size).to(torch.float32)
            divisors = {g.device: divisor.to(g.device) for g in grads}
            for device in divisors:
                torch._foreach_div_([g for g in grads if g.device == device], divisors[device])
        elif grads:
            if self._weight <= 0:
                raise ValueError(f"the window's total count is {self._weight}; num_items must be > 0")
            torch._foreach_div_(grads, self._weight)
        self._ready = True

    def refuse_closure(self) -> None:
        """Raise when windows hold several micro-steps: a closure re-runs one batch."""
        if self.steps > 1:
            raise NotImplementedError(
                f"accumulation.steps = {self.steps} cannot step with a closure: the optimizer "
                "re-runs the closure on one batch. Set [accumulation] steps = 1, or call "
                "loss = closure() yourself in each micro-step and then optimizer.step()"
            )

    def reset(self) -> None:
        """Forget the open window (after a step, or to abandon a partial one)."""
        self._accumulated = 0
        self._weight = 0.0
        self._items_mode = None
        self._ready = False


# -- the descriptor -------------------------------------------------------------------------

def _batch_size(loader: Any) -> int | None:
    size = getattr(loader, "batch_size", None)
    return size if isinstance(size, int) else None


def _resolve(ctx: ResolveContext) -> Resolution:
    acc = resolve_accumulation(ctx.config.accumulation, batch_size=_batch_size(ctx.loader),
                               world_size=ctx.env.world_size)
    values = Overlay.of(AccumulationConfig, steps=acc.steps, effective_batch_size=acc.effective_batch_size,
                        micro_batch_size=acc.micro_batch_size)
    return Resolution(values, acc.reasons, detail=acc)


def _apply(prep: Preparation) -> None:
    # After the loader (the window closes on its last batch), before the optimizer (whose
    # step and zero_grad go through the window).
    acc = prep.details["accumulation"]
    micro = acc.micro_batch_size
    prep.accumulator = Accumulator(acc.steps, position=prep.prepared_loader, unit=_batch_size(prep.loader) or 1,
                                   reduce_sum=prep.dist.reduce_sum, world_size=prep.dist.world_size,
                                   device=prep.device, micro_batch_size=micro if isinstance(micro, int) else None)


def _spell(section: AccumulationConfig) -> FrameworkSpelling:
    k = section.steps
    return FrameworkSpelling(lightning={"accumulate_grad_batches": k}, accelerator={"gradient_accumulation_steps": k},
                             transformers={"gradient_accumulation_steps": k},
                             code=(f"(loss / {k}).backward()  # and optimizer.step() + zero_grad() every {k} batches",))


TECHNIQUE = Technique(
    name="accumulation",
    title="gradient accumulation",
    after=('loader',),
    placed="the accumulation window needs the prepared loader's length to step on its last batch",
    section=AccumulationConfig,
    resolve=_resolve,
    apply=_apply,
    nocode_refusal="accumulation changes the loop",
    spell=_spell,
)
