"""A training loop that evaluates every 10 steps, in eval mode but with gradients on.

    python eval_with_grad.py [--epochs 2]     the script as a user runs it
    python eval_with_grad.py --by-hand 5      the reference: one JSON line

Training: batches of 64 of 8192 samples; evaluation: 4096 held-out samples in batches of
16, ``model.eval()`` but no ``torch.no_grad()`` (each call builds an autograd graph nothing
reads), every 10 steps. By hand, in this one process, interleaved (``--by-hand`` rounds),
medians: ten training steps, one evaluation as the script runs it, the same under
``torch.inference_mode()``, and in batches of 512: ``{"ten_steps_ms", "eval_ms",
"eval_no_grad_ms", "eval_batch512_ms", "eval_pct"}``, ``eval_pct`` the evaluation's share of
the run's time (one pass per ten steps).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
train_set = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
val_set = TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
val_loader = DataLoader(val_set, batch_size=16)


def evaluate(loader: DataLoader = val_loader) -> float:
    model.eval()
    correct = 0
    for x, y in loader:
        correct += (model(x).argmax(1) == y).sum().item()
    model.train()
    return correct / len(loader.dataset)


def train_step(x: torch.Tensor, y: torch.Tensor) -> None:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _ms(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def by_hand(rounds: int) -> dict:
    batches = itertools.cycle(train_loader)
    big = DataLoader(val_set, batch_size=512)
    found: dict[str, list[float]] = {"ten_steps_ms": [], "eval_ms": [], "eval_no_grad_ms": [], "eval_batch512_ms": []}
    for _ in range(rounds):
        found["ten_steps_ms"].append(_ms(lambda: [train_step(*next(batches)) for _ in range(10)]))
        found["eval_ms"].append(_ms(evaluate))
        found["eval_no_grad_ms"].append(_ms(lambda: torch.inference_mode()(evaluate)()))
        found["eval_batch512_ms"].append(_ms(lambda: evaluate(big)))
    medians = {k: statistics.median(v) for k, v in found.items()}
    medians["eval_pct"] = 100 * medians["eval_ms"] / (medians["eval_ms"] + medians["ten_steps_ms"])
    return medians


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--by-hand", type=int, default=0, metavar="ROUNDS")
    args = parser.parse_args()
    if args.by_hand:
        print(json.dumps(by_hand(args.by_hand)))
        return
    for _ in range(args.epochs):
        for step, (x, y) in enumerate(train_loader):
            train_step(x, y)
            if step % 10 == 0:
                evaluate()


if __name__ == "__main__":
    main()
