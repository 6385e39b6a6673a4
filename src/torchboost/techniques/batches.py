"""Batches on the training device: walking nested batches, moving them, a device-side loader.

:class:`DeviceLoader` wraps any loader so iterating it yields batches already on the
training device (``non_blocking`` copies when memory is pinned); :func:`map_tensors`
walks the structures a ``collate_fn`` can return.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, MutableMapping
from typing import Any, Callable, Iterator

import torch

__all__ = ["DeviceLoader", "map_tensors", "move_to_device"]


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor in a nested batch; the structure is rebuilt around them.

    Walks tuples, namedtuples, lists, mappings (their type kept when it can be copied)
    and dataclass instances (rebuilt with ``dataclasses.replace``); anything else
    (strings, numbers, other objects) is returned as is.
    """
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, tuple):
        items = [map_tensors(item, fn) for item in batch]
        if hasattr(batch, "_fields"):  # namedtuple
            return type(batch)(*items)
        return tuple(items) if type(batch) is tuple else type(batch)(items)
    if isinstance(batch, list):
        return [map_tensors(item, fn) for item in batch]
    if isinstance(batch, MutableMapping):
        out = copy.copy(batch)  # keeps OrderedDict, defaultdict, UserDict-based batch types
        for key, value in batch.items():
            out[key] = map_tensors(value, fn)
        return out
    if isinstance(batch, Mapping):
        return {key: map_tensors(value, fn) for key, value in batch.items()}
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {
            f.name: map_tensors(getattr(batch, f.name), fn) for f in dataclasses.fields(batch) if f.init
        }
        return dataclasses.replace(batch, **changes)
    return batch


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
