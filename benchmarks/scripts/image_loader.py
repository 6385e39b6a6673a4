"""A loader-bound image-classification script, plain PyTorch: the kind tune must not oversell.

    python benchmarks/scripts/image_loader.py [--epochs 3] [--samples 4096] [--batch-size 64]

Synthetic 3x32x32 images made and augmented per sample in numpy (random crop, flip, a
small colour jitter) by a map-style dataset, a small CNN, SGD, a fixed number of epochs.
Its own defaults: no loader workers, torch's threads.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    """Images drawn from a seeded generator per index, augmented in numpy each time they are read."""

    def __init__(self, samples: int) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int):
        rng = np.random.default_rng(index)
        image = rng.random((3, 40, 40), dtype=np.float32)
        top, left = np.random.randint(0, 9, size=2)
        image = image[:, top:top + 32, left:left + 32]
        if np.random.rand() < 0.5:
            image = image[:, :, ::-1]
        image = image * np.random.uniform(0.8, 1.2, size=(3, 1, 1)).astype(np.float32)
        image = (image - image.mean(axis=(1, 2), keepdims=True)) / (image.std(axis=(1, 2), keepdims=True) + 1e-5)
        return torch.from_numpy(np.ascontiguousarray(image)), index % 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Images(args.samples), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = time.perf_counter()
    for epoch in range(args.epochs):
        for images, labels in loader:
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: loss {loss.item():.4f}, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
