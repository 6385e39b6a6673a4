"""A forward of pure Python: the model loops over every element of its batch in Python.

``python python_forward.py``: a model whose forward reads its batch out with ``tolist()``,
runs a smoothing recurrence along each row in plain Python (no torch op), and feeds the
result to a small Linear; AdamW, batch 32 of 32768 features. Its step is about half a second
of Python around a millisecond of ops.

``--by-hand``: instead of training, time ROUNDS steps by hand: the forward's Python part
(the loop) and its torch part, the backward and the optimizer step, each with
``time.perf_counter``; prints the medians as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

BATCH, WIDTH = 32, 32768


def smooth(rows: list[list[float]]) -> list[list[float]]:
    """Each row smoothed left to right, in plain Python: the forward's hot loop."""
    out = []
    for row in rows:
        level, trend, smoothed = row[0], 0.0, []
        for value in row:
            last = level
            level = 0.5 * value + 0.5 * (level + trend)
            trend = 0.3 * (level - last) + 0.7 * trend
            smoothed.append(level + trend)
        out.append(smoothed)
    return out


class PythonForward(nn.Module):
    """Smoothing in Python, then a Linear to 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(WIDTH, 10)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tensor(smooth(x.tolist()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def by_hand(model: PythonForward, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
            rounds: int) -> dict[str, float]:
    """Median ms of the forward's Python, its ops, the backward and the optimizer step."""
    parts: dict[str, list[float]] = {"python_ms": [], "forward_ops_ms": [], "backward_ms": [], "optimizer_ms": [],
                                     "step_ms": []}
    for _ in range(rounds):
        begin = start = time.perf_counter()
        features = model.features(x)
        parts["python_ms"].append(_ms(start))
        start = time.perf_counter()
        loss = nn.functional.cross_entropy(model.head(features), y)
        parts["forward_ops_ms"].append(_ms(start))
        start = time.perf_counter()
        loss.backward()
        parts["backward_ms"].append(_ms(start))
        start = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        parts["optimizer_ms"].append(_ms(start))
        parts["step_ms"].append(_ms(begin))
    return {**{k: statistics.median(v) for k, v in parts.items()}, "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--by-hand", type=int, default=0, metavar="ROUNDS",
                        help="time ROUNDS steps by hand instead of training")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = PythonForward()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(BATCH, WIDTH), torch.randint(0, 10, (BATCH,))
    if args.by_hand:
        print(json.dumps(by_hand(model, optimizer, x, y, args.by_hand)), flush=True)
        return
    for step in range(args.steps):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
