"""Automatic micro-batching: one optimizer step on a batch split to fit memory.

:class:`MicroBatcher` runs ``Booster.train_step``: it splits one batch into micro-batches,
and when one runs out of memory it clears the partial gradients, halves the size and
re-runs the batch from its start, so no step is lost. :func:`is_oom` is the one place that
decides what an out-of-memory error is.
"""

from __future__ import annotations

import gc
import warnings
from typing import Any, Callable, Iterator

import torch
from torch import nn

from torchboost.step import TrainStep
from torchboost.techniques._tensors import map_tensors

__all__ = ["MicroBatchWarning", "MicroBatcher", "batch_size_of", "is_oom", "split_batch"]

# Substrings of out-of-memory errors that do not raise torch.OutOfMemoryError (cuBLAS or
# cuDNN failing to allocate a workspace, MPS, HIP).
_OOM_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED", "MPS backend out of memory")


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` means the device ran out of memory (CUDA, cuBLAS/cuDNN, MPS)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _OOM_MARKERS)


class MicroBatchWarning(UserWarning):
    """A micro-batch ran out of memory and ``train_step`` halved the micro-batch size."""


# -- batches -----------------------------------------------------------------------------


def batch_size_of(batch: Any) -> int | None:
    """Samples in ``batch``: the first dimension of its first tensor (None without tensors)."""
    sizes: list[int] = []

    def seen(t: torch.Tensor) -> torch.Tensor:
        if not sizes and t.dim() > 0:
            sizes.append(int(t.shape[0]))
        return t

    map_tensors(batch, seen)
    return sizes[0] if sizes else None


def split_batch(batch: Any, size: int) -> Iterator[tuple[Any, int]]:
    """Yield ``(micro_batch, samples)`` slices of ``size`` samples along the first dimension.

    Every tensor whose first dimension is the batch size is sliced; other values are
    passed to each micro-batch unchanged.
    """
    total = batch_size_of(batch)
    if total is None:
        raise ValueError("split_batch: the batch holds no tensor with a batch dimension")
    for start in range(0, total, size):
        stop = min(start + size, total)
        cut = lambda t, a=start, b=stop: t[a:b] if t.dim() > 0 and t.shape[0] == total else t  # noqa: E731
        yield map_tensors(batch, cut), stop - start


# -- automatic micro-batching ----------------------------------------------------------------


class MicroBatcher:
    """Runs one optimizer step on a batch split into micro-batches (``Booster.train_step``).

    Args:
        size: samples per micro-batch, or None for the whole batch first.
        simulate_oom_from: a test hook: a micro-batch of this many samples or more raises
            ``torch.OutOfMemoryError`` after its backward (partial gradients exist), as a
            device that is out of memory would. None in real use.
    """

    def __init__(self, size: int | None = None, *, simulate_oom_from: int | None = None) -> None:
        self.size = size
        """The current micro-batch size (samples); lowered for good after out-of-memory."""
        self.simulate_oom_from = simulate_oom_from
        self.halvings = 0
        """How many times the size was halved after running out of memory."""

    def run(self, batch: Any, compute_loss: Callable[[Any], Any], *, model: nn.Module, optimizer: Any,
            step: TrainStep) -> torch.Tensor:
        """Forward/backward every micro-batch through ``step``, then step ``optimizer`` (the
        prepared one, whose calls go through ``step`` too) once and zero it.

        ``compute_loss(micro_batch)`` returns a mean loss, or ``(loss_sum, num_items)``.
        Returns the batch's loss (detached): the sample-weighted mean, or sum / items.
        """
        total = batch_size_of(batch)
        if total is None:
            raise ValueError("train_step: the batch holds no tensor with a batch dimension")
        size = min(self.size or total, total)
        while True:
            try:
                loss = self._attempt(batch, compute_loss, size, model, step)
                break
            except Exception as exc:  # noqa: BLE001 - anything but out-of-memory is re-raised
                if not is_oom(exc) or size == 1:
                    raise
            # Outside the except block: the traceback, and the activations it holds, are freed.
            step.abandon()
            optimizer.zero_grad(set_to_none=True)
            _free_device_memory()
            size = max(1, size // 2)
            self.size = size
            self.halvings += 1
            warnings.warn(
                f"train_step: a micro-batch ran out of memory; re-running the batch with "
                f"micro-batches of {size} samples (kept from now on)",
                MicroBatchWarning,
                stacklevel=3,
            )
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    def _attempt(self, batch, compute_loss, size, model, step) -> torch.Tensor:
        parts = list(split_batch(batch, size))
        summed, count = None, 0.0
        for index, (micro, samples) in enumerate(parts):
            with step.window(model, samples / size, last=index == len(parts) - 1):
                with step.autocast():
                    out = compute_loss(micro)
                if isinstance(out, tuple):
                    loss, items = out
                    step.backward(loss, num_items=items)
                    # A copy (``float()`` of an fp32 loss is the tensor itself): under CUDA graphs
                    # the next micro-batch's replay overwrites the loss the graph returned.
                    part, weight = loss.detach().to(torch.float32, copy=True), float(items)
                else:
                    step.backward(out)
                    part, weight = out.detach().float() * samples, float(samples)
                if self.simulate_oom_from is not None and samples >= self.simulate_oom_from:
                    raise torch.OutOfMemoryError(f"simulated: micro-batch of {samples} samples")
            summed = part if summed is None else summed + part
            count += weight
        assert summed is not None
        return summed / count


def _free_device_memory() -> None:
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
