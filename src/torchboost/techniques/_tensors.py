"""Walking a nested batch's tensors: the one place that knows a ``collate_fn``'s structures.

Private to the techniques: the loader moves batches to the device with it, memory converts
them to channels_last, micro-batching splits them.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, MutableMapping
from typing import Any, Callable

import torch

__all__ = ["map_tensors"]


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
