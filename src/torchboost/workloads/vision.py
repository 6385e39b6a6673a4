"""Small ResNet on synthetic images with real per-sample CPU augmentation.

Run: ``python -m torchboost.workloads.vision [--steps N] [--size tiny|small] [--booster]``.
Images are deterministic 3x32x32 uint8 pictures: noise plus a class-specific stripe
pattern (orientation and frequency), so the classes are learnable and the loss falls.
``__getitem__`` augments each sample in numpy like a torchvision pipeline would, so
with ``num_workers=0`` the loader, not the model, bounds a step on a small CPU.

Augmentations: reflect-padded random crop, horizontal flip, brightness/contrast/
saturation/hue jitter, sensor noise and random erasing.
"""

from __future__ import annotations

import sys
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from torchboost.workloads._loop import Workload, main_for

__all__ = ["AugmentedImages", "ResNet", "build", "main"]

NAME = "vision"
_SHAPES = {  # size -> (stage widths, blocks per stage, stem stride, classes, default batch, samples)
    "tiny": ((8, 16, 32), 1, 2, 4, 64, 2048),
    "small": ((16, 32, 64), 2, 1, 10, 128, 10000),
    "gpt2": ((64, 128, 256), 2, 1, 10, 256, 50000),
}
_MEAN = np.array([0.5, 0.5, 0.5], dtype=np.float32)
_STD = np.array([0.25, 0.25, 0.25], dtype=np.float32)


def _images(samples: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=samples)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32)
    patterns = []
    for k in range(classes):
        angle = np.pi * k / classes
        freq = 0.25 + 0.1 * (k % 3)
        wave = np.sin(freq * (np.cos(angle) * xx + np.sin(angle) * yy))
        colour = 0.5 + 0.5 * np.cos(np.arange(3) + k)  # a per-class tint
        patterns.append(wave[..., None] * colour)
    noise = rng.normal(0.0, 0.35, size=(samples, 32, 32, 3)).astype(np.float32)
    images = 0.5 + 0.15 * np.stack(patterns)[labels] + noise * 0.3
    return (np.clip(images, 0, 1) * 255).astype(np.uint8), labels.astype(np.int64)


def _hue_matrix(turns: float) -> np.ndarray:
    """RGB -> RGB matrix rotating hue by ``turns`` of a full circle (through YIQ space)."""
    to_yiq = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
    c, s = np.cos(2 * np.pi * turns), np.sin(2 * np.pi * turns)
    rotate = np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    return (np.linalg.inv(to_yiq) @ rotate @ to_yiq).T.astype(np.float32)


class AugmentedImages(Dataset):
    """Synthetic HWC uint8 images; each item is augmented in numpy and returned as CHW float32."""

    def __init__(self, samples: int, classes: int, *, seed: int = 0, pad: int = 4) -> None:
        self.images, self.labels = _images(samples, classes, seed)
        self.pad = pad
        self.seed = seed

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        # The augmentation is drawn from (seed, index): the same batches come out with any
        # number of DataLoader workers, so runs that differ only in loader settings train
        # on identical data and their losses can be compared step by step.
        rng = np.random.default_rng((self.seed, int(i)))
        p = self.pad
        img = np.pad(self.images[i], ((p, p), (p, p), (0, 0)), mode="reflect")
        top, left = rng.integers(0, 2 * p + 1, size=2)
        img = img[top : top + 32, left : left + 32].astype(np.float32) / 255.0
        if rng.random() < 0.5:
            img = img[:, ::-1]
        brightness, contrast, saturation = rng.uniform(0.8, 1.2, size=3).astype(np.float32)
        img = img * brightness
        img = (img - img.mean()) * contrast + img.mean()
        grey = img.mean(axis=2, keepdims=True)
        img = (img - grey) * saturation + grey
        img = img @ _hue_matrix(rng.uniform(-0.1, 0.1))
        img = img + rng.normal(0.0, 0.02, size=img.shape).astype(np.float32)  # sensor noise
        if rng.random() < 0.5:  # random erasing (cutout) of an 8x8 patch
            cy, cx = rng.integers(0, 25, size=2)
            img[cy : cy + 8, cx : cx + 8] = 0.5
        img = (np.clip(img, 0.0, 1.0) - _MEAN) / _STD
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), torch.tensor(self.labels[i])


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.skip(x))


class ResNet(nn.Module):
    """A CIFAR-style ResNet: a 3x3 stem, one stage per width (stride 2 after the first).

    ``stem_stride=2`` halves the resolution at once: the tiny size stays cheaper than
    its augmentation, as small models on large images are.
    """

    def __init__(self, widths: Sequence[int], blocks: int, classes: int, stem_stride: int = 1) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, stem_stride, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        layers: list[nn.Module] = []
        cin = widths[0]
        for s, width in enumerate(widths):
            for b in range(blocks):
                layers.append(_Block(cin, width, 2 if s > 0 and b == 0 else 1))
                cin = width
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (batch, classes) for images (batch, 3, 32, 32)."""
        x = self.layers(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _sgd(params, **kwargs) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4, **kwargs)


def build(size: str = "tiny", *, batch_size: int | None = None, seed: int = 0) -> Workload:
    """A small ResNet on augmented synthetic 32x32 images; loader-bound at num_workers=0."""
    if size not in _SHAPES:
        raise ValueError(f"size: expected one of {', '.join(_SHAPES)}; got {size!r}")
    widths, blocks, stem_stride, classes, default_batch, samples = _SHAPES[size]
    torch.manual_seed(seed)
    return Workload(
        name=NAME,
        model=ResNet(widths, blocks, classes, stem_stride),
        dataset=AugmentedImages(samples, classes, seed=seed),
        loss_fn=nn.functional.cross_entropy,
        make_optimizer=_sgd,
        batch_size=batch_size or default_batch,
        description=f"ResNet widths {widths} x{blocks} blocks, {classes} classes, 3x32x32 augmented",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry point; returns the exit code."""
    return main_for(NAME, build, argv)


if __name__ == "__main__":
    sys.exit(main())
