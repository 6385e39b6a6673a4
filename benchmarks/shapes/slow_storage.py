"""A map-style dataset on slow storage: each sample waits 4 ms off the CPU, batch 32, a small MLP.

Each ``__getitem__`` sleeps 4 ms before it returns its sample, as a read from a throttled
disk or a network share waits without using the CPU; the samples themselves are made once.
The loader is written as a first script writes it (``num_workers=0``, shuffled), the model
is 64-256-256-10 with AdamW, seeded. ``python slow_storage.py [--steps 300]``.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

BATCH = 32
WAIT_S = 0.004
"""Seconds each sample waits off the CPU."""
FEATURES = 64


class SlowStorage(Dataset):
    """``n`` samples of ``FEATURES`` features and a class, each read after ``wait_s`` seconds."""

    def __init__(self, n: int, wait_s: float = WAIT_S) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, FEATURES, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.wait_s = wait_s

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.wait_s)  # the storage's latency: no CPU used meanwhile
        return self.x[i], self.y[i]


def build(steps: int, num_workers: int = 0, **loader_args) -> tuple[nn.Module, torch.optim.Optimizer, DataLoader]:
    """The model, its optimizer and a loader of ``steps`` batches (one epoch)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(SlowStorage(steps * BATCH), batch_size=BATCH, shuffle=True, num_workers=num_workers,
                        **loader_args)
    return model, optimizer, loader


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    model, optimizer, loader = build(args.steps)
    for step, (x, y) in enumerate(loader):
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
