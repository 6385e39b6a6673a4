"""Tabular MLP: many small ops per step, so host overhead (not arithmetic) bounds it.

Run: ``python -m torchboost.workloads.mlp [--steps N] [--size tiny|small|gpt2] [--booster]``.
The data are random features labelled by a fixed random "teacher" network, so the
loss falls as the MLP learns the teacher's decision regions.
"""

from __future__ import annotations

import sys
from typing import Sequence

import torch
from torch import nn
from torch.utils.data import Dataset

from torchboost.workloads._loop import Workload, main_for

__all__ = ["TabularDataset", "build", "main"]

NAME = "mlp"
_SHAPES = {  # size -> (features, width, layers, classes, default batch, samples)
    "tiny": (32, 64, 8, 4, 64, 8192),
    "small": (64, 256, 8, 8, 128, 32768),
    "gpt2": (128, 1024, 12, 16, 512, 131072),
}


class TabularDataset(Dataset):
    """``samples`` rows of ``features`` float32 features with an integer class label."""

    def __init__(self, samples: int, features: int, classes: int, *, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(samples, features, generator=g)
        teacher = nn.Sequential(nn.Linear(features, 32), nn.Tanh(), nn.Linear(32, classes))
        with torch.no_grad():
            for p in teacher.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
            self.y = teacher(self.x).argmax(dim=1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def _mlp(features: int, width: int, layers: int, classes: int) -> nn.Sequential:
    blocks: list[nn.Module] = [nn.Linear(features, width), nn.ReLU()]
    for _ in range(layers - 2):
        blocks += [nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU()]
    blocks.append(nn.Linear(width, classes))
    return nn.Sequential(*blocks)


def _adam(params, **kwargs) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3, **kwargs)


def build(size: str = "tiny", *, batch_size: int | None = None, seed: int = 0) -> Workload:
    """A tabular MLP classifier (tiny: 8 layers of width 64, batch 64), host-overhead bound."""
    if size not in _SHAPES:
        raise ValueError(f"size: expected one of {', '.join(_SHAPES)}; got {size!r}")
    features, width, layers, classes, default_batch, samples = _SHAPES[size]
    torch.manual_seed(seed)
    model = _mlp(features, width, layers, classes)
    return Workload(
        name=NAME,
        model=model,
        dataset=TabularDataset(samples, features, classes, seed=seed),
        loss_fn=nn.functional.cross_entropy,
        make_optimizer=_adam,
        batch_size=batch_size or default_batch,
        description=f"MLP {layers}x{width} on {features} tabular features, {classes} classes",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point; returns the exit code."""
    return main_for(NAME, build, argv)


if __name__ == "__main__":
    sys.exit(main())
