"""Built-in reference workloads: plain PyTorch training scripts for demo, tune and bench.

Each is runnable as ``python -m torchboost.workloads.NAME [--steps N] [--batch-size B]
[--size tiny|small|gpt2] [--seed S] [--booster]`` and exposes ``build(size, *,
batch_size=None, seed=0) -> Workload`` and ``main(argv) -> int``:

- ``gpt``: a small decoder-only transformer on a byte stream (compute bound);
- ``vision``: a small ResNet with per-sample CPU augmentation (loader bound at 0 workers);
- ``mlp``: a deep narrow MLP on tabular data (host-overhead bound);
- ``data``: a trivial model over samples with a per-sample CPU cost (the loading ceiling).

``REGISTRY`` maps each name to its module, imported on first access so that
``python -m torchboost.workloads.gpt`` does not import the module twice.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Iterator

from torchboost.workloads._loop import RunResult, Workload, make_loader, train

__all__ = ["REGISTRY", "NAMES", "RunResult", "Workload", "make_loader", "train"]

NAMES = ("gpt", "vision", "mlp", "data")
"""The built-in workload names, in the order reports list them."""


class _LazyRegistry(Mapping):
    """name -> workload module, imported when first looked up."""

    def __getitem__(self, name: str) -> ModuleType:
        if name not in NAMES:
            raise KeyError(f"unknown workload {name!r}; choose from {', '.join(NAMES)}")
        return importlib.import_module(f"{__name__}.{name}")

    def __iter__(self) -> Iterator[str]:
        return iter(NAMES)

    def __len__(self) -> int:
        return len(NAMES)


REGISTRY: Mapping[str, ModuleType] = _LazyRegistry()
"""Workload name -> module with ``build(size, *, batch_size=None, seed=0)`` and ``main(argv)``."""
