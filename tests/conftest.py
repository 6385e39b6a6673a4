"""Test-wide rules: a test marked ``gpu`` runs only where torch sees a CUDA GPU.

``python -m pytest -m gpu`` collects exactly those tests (the GPU machine's smoke stage runs
them, the smoke stage of ``benchmarks/gpu.sh``); without a GPU each one is skipped with the reason.
"""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
