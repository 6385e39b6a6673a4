"""A small CNN on 32x32 images, CIFAR-10's shape: three conv blocks with batch norm, SGD.

32/64/128 channels, batch 16, SGD with momentum, on random images. ``python small_cnn.py --steps N``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).parent))
from _common import train  # noqa: E402

BATCH = 16


def _block(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                         nn.MaxPool2d(2))


def build() -> tuple[nn.Module, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    torch.manual_seed(0)
    model = nn.Sequential(_block(3, 32), _block(32, 64), _block(64, 128), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, optimizer, [(torch.randn(BATCH, 3, 32, 32), torch.randint(0, 10, (BATCH,))) for _ in range(4)]


def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


if __name__ == "__main__":
    train(build, loss)
