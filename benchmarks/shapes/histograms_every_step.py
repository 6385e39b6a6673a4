"""A training loop that logs a TensorBoard histogram of every parameter and gradient each step.

    python histograms_every_step.py [--steps 300]    the script as a user runs it
    python histograms_every_step.py --by-hand 10     the reference: one JSON line

Needs ``pip install tensorboard`` (``torch.utils.tensorboard`` writes through it). The
writer logs into a new folder under the temp directory each run. By hand, in this one
process, steps with the histograms and steps without are timed interleaved (``--by-hand``
rounds of 5 steps each way), medians: ``{"with_ms", "without_ms", "histograms_ms"}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
from torch.utils.tensorboard import SummaryWriter

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                            torch.nn.ReLU(), torch.nn.Linear(256, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
writer = SummaryWriter(tempfile.mkdtemp(prefix="runs-"))


def log_histograms(step: int) -> None:
    for name, p in model.named_parameters():
        writer.add_histogram(f"weights/{name}", p, step)
        writer.add_histogram(f"grads/{name}", p.grad, step)


def step(i: int, log: bool) -> None:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if log:
        log_histograms(i)  # every step, every parameter and gradient


def by_hand(rounds: int) -> dict:
    times: dict[bool, list[float]] = {True: [], False: []}
    i = 0
    for _ in range(rounds):
        for log in (True, False):
            for _ in range(5):
                start = time.perf_counter()
                step(i, log)
                times[log].append((time.perf_counter() - start) * 1000)
                i += 1
    with_ms, without_ms = statistics.median(times[True]), statistics.median(times[False])
    return {"with_ms": with_ms, "without_ms": without_ms, "histograms_ms": with_ms - without_ms}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--by-hand", type=int, default=0, metavar="ROUNDS")
    args = parser.parse_args()
    if args.by_hand:
        print(json.dumps(by_hand(args.by_hand)))
        return
    for i in range(args.steps):
        step(i, log=True)
    writer.close()


if __name__ == "__main__":
    main()
