"""Data-loading ceiling: a trivial model over a dataset whose samples cost real CPU time.

Run: ``python -m torchboost.workloads.data [--sample-cost-us US] [--booster]``.
Each ``__getitem__`` does about ``sample_cost_us`` microseconds of numpy arithmetic
(a fixed amount of work, calibrated once per process), so throughput is bounded by
how many samples the loader can prepare per second, not by the model.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from torchboost.workloads._loop import Workload, main_for

__all__ = ["CostlyDataset", "build", "main", "DEFAULT_SAMPLE_COST_US"]

NAME = "data"
DEFAULT_SAMPLE_COST_US = 200.0
"""Default per-sample CPU work, microseconds."""
_SHAPES = {  # size -> (features, classes, default batch, samples)
    "tiny": (32, 4, 32, 4096),
    "small": (128, 8, 64, 16384),
    "gpt2": (512, 16, 128, 65536),
}
_WORK = np.linspace(0.0, 1.0, 4096, dtype=np.float32)


def _work_unit() -> float:
    # One unit of real arithmetic; its result is used so nothing can skip it.
    return float(np.sin(_WORK).sum())


@functools.lru_cache(maxsize=None)
def _units_for(cost_us: float) -> int:
    """Work units that take ``cost_us`` microseconds here (fastest of several timings)."""
    if cost_us <= 0:
        return 0
    reps = 50
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            _work_unit()
        best = min(best, (time.perf_counter() - start) / reps)
    return max(1, round(cost_us * 1e-6 / best))


class CostlyDataset(Dataset):
    """Fixed random features/labels; each item costs ``sample_cost_us`` of CPU work first."""

    def __init__(self, samples: int, features: int, classes: int, *, sample_cost_us: float, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(samples, features, generator=g)
        self.y = (self.x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
        self.units = _units_for(float(sample_cost_us))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        acc = 0.0
        for _ in range(self.units):
            acc += _work_unit()
        # acc * 0 keeps the work on the data path without changing the sample.
        return self.x[i] + float(acc) * 0.0, self.y[i]


def _sgd(params, **kwargs) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, **kwargs)


def build(
    size: str = "tiny",
    *,
    batch_size: int | None = None,
    seed: int = 0,
    sample_cost_us: float = DEFAULT_SAMPLE_COST_US,
) -> Workload:
    """A linear classifier over samples that each cost ``sample_cost_us`` µs of CPU to load."""
    if size not in _SHAPES:
        raise ValueError(f"size: expected one of {', '.join(_SHAPES)}; got {size!r}")
    if sample_cost_us < 0:
        raise ValueError(f"sample_cost_us: expected >= 0 microseconds; got {sample_cost_us}")
    features, classes, default_batch, samples = _SHAPES[size]
    torch.manual_seed(seed)
    return Workload(
        name=NAME,
        model=nn.Linear(features, classes),
        dataset=CostlyDataset(samples, features, classes, sample_cost_us=sample_cost_us, seed=seed),
        loss_fn=nn.functional.cross_entropy,
        make_optimizer=_sgd,
        batch_size=batch_size or default_batch,
        description=f"linear model, {sample_cost_us:g} us of CPU work per sample",
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sample-cost-us",
        type=float,
        default=DEFAULT_SAMPLE_COST_US,
        help=f"CPU work per sample, microseconds (default {DEFAULT_SAMPLE_COST_US:g})",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point; returns the exit code."""
    return main_for(NAME, build, argv, add_arguments=_add_arguments)


if __name__ == "__main__":
    sys.exit(main())
