"""The bytes each aten op of one step reads and writes, counted beside its FLOPs.

A ``TorchDispatchMode`` sees every aten op the step runs (forward, backward, optimizer)
with its tensors. An op's bytes are the sizes of its tensor inputs and outputs (elements x
element size): what it must read and write at least once, the traffic a roofline divides
the FLOPs by. An in-place op counts its tensor read and written (``add_`` reads two tensors
and writes one). Views (``view``, ``t``, ``expand``...) move nothing and count nothing, nor
does an op whose result shares its input's storage without writing it (``_unsafe_view``,
which the schema does not mark as a view); a tensor that is not dense (sparse, nested) is
left out. Caches can serve part of the
traffic, so the count is the op's compulsory traffic, not DRAM's.

Entered with :class:`~torchboost.observe.probes.flop_count.StepFlops`, in the same unrecorded
step: its cost is in no recorded or profiled step.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["ByteCounterMode", "tensor_bytes"]


def _storages(values: Any) -> set[int]:
    found = set()
    for leaf in tree_leaves(values):
        if isinstance(leaf, torch.Tensor) and leaf.layout == torch.strided:
            try:
                found.add(leaf.untyped_storage().data_ptr())
            except Exception:  # noqa: BLE001 - a tensor with no storage (fake, functional) aliases nothing
                continue
    return found


def _aliases_only(func: Any, inputs: Any, out: Any) -> bool:
    """A view, or a result that shares an input's storage without the op writing to it."""
    if getattr(func, "is_view", False):
        return True
    schema = getattr(func, "_schema", None)
    if schema is not None and schema.is_mutable:
        return False
    return bool(_storages(out) & _storages(inputs))


def tensor_bytes(values: Any) -> int:
    """Bytes of the dense tensors among ``values`` (any nesting of lists, tuples, dicts)."""
    total = 0
    for leaf in tree_leaves(values):
        if isinstance(leaf, torch.Tensor) and leaf.layout == torch.strided:
            total += leaf.numel() * leaf.element_size()
    return total


class ByteCounterMode(TorchDispatchMode):
    """Counts each op's input and output bytes by op packet ("aten.mm"), as ``FlopCounterMode``
    names them; :attr:`by_op` after the mode is left."""

    def __init__(self) -> None:
        super().__init__()
        self.by_op: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        out = func(*args, **(kwargs or {}))
        if not _aliases_only(func, (args, kwargs or {}), out):
            moved = tensor_bytes((args, kwargs or {})) + tensor_bytes(out)
            if moved:
                self.by_op[str(func.overloadpacket)] += moved
        return out
