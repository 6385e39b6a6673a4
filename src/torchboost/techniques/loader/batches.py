"""Batches on the training device: walking nested batches, moving them, a device-side loader.

:class:`DeviceLoader` wraps any loader so iterating it yields batches already on the
training device (``non_blocking`` copies when memory is pinned); :func:`map_tensors`
(:mod:`torchboost.techniques._tensors`) walks the structures a ``collate_fn`` can return.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from torchboost.techniques._tensors import map_tensors

__all__ = ["DeviceLoader", "map_tensors", "move_to_device"]


def move_to_device(batch: Any, device: torch.device | str, *, non_blocking: bool = False) -> Any:
    """``batch`` with every tensor moved to ``device`` (see :func:`map_tensors` for structures).

    ``non_blocking=True`` makes copies from pinned memory asynchronous to the host.
    Tensors already on ``device`` are returned as they are (no copy).
    """
    device = torch.device(device)
    return map_tensors(batch, lambda t: t.to(device, non_blocking=non_blocking))


class DeviceLoader:
    """Wraps a loader so that iterating yields batches on ``device``.

    ``len()``, ``.dataset``, ``.batch_size`` and ``.sampler`` pass through (so
    ``loader.sampler.set_epoch(e)`` still works); ``.loader`` is the wrapped loader, and
    any other attribute is looked up there. ``transform`` (e.g. :func:`to_channels_last
    <torchboost.techniques.memory.to_channels_last>`) runs on each batch after the move.
    """

    def __init__(
        self,
        loader: Any,
        device: torch.device | str,
        *,
        non_blocking: bool,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        self.loader = loader
        self.device = torch.device(device)
        self.non_blocking = non_blocking
        self.transform = transform

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            batch = move_to_device(batch, self.device, non_blocking=self.non_blocking)
            yield batch if self.transform is None else self.transform(batch)

    def __len__(self) -> int:
        return len(self.loader)

    @property
    def dataset(self) -> Any:
        """The wrapped loader's dataset."""
        return self.loader.dataset

    @property
    def batch_size(self) -> int | None:
        """The wrapped loader's batch size (samples per batch)."""
        return self.loader.batch_size

    @property
    def sampler(self) -> Any:
        """The wrapped loader's sampler."""
        return self.loader.sampler

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not found normally; "loader" itself is excluded so a
        # half-built instance (e.g. while unpickling) does not recurse.
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __repr__(self) -> str:
        return f"DeviceLoader({self.loader!r}, device={self.device}, non_blocking={self.non_blocking})"
