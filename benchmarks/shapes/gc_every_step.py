"""A training loop that calls ``gc.collect()`` after every step, with 300k live Python objects.

    python gc_every_step.py [--steps 300]          the script as a user runs it
    python gc_every_step.py --by-hand 10           the reference: one JSON line

A sample cache of 300,000 small dicts stays alive, as a dataset's cache would; every full
collection walks it. By hand, in this one process, steps with the call and steps without
are timed interleaved (``--by-hand`` rounds of 5 steps each way), medians:
``{"with_ms", "without_ms", "gc_ms"}``, where ``gc_ms`` is what the call adds to a step.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import torch

torch.manual_seed(0)
CACHE = [{"index": i, "path": f"sample_{i}.jpg"} for i in range(300_000)]
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)


def step(collect: bool) -> None:
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if collect:
        gc.collect()  # the script's own call, every step


def by_hand(rounds: int) -> dict:
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(rounds):
        for collect in (True, False):
            for _ in range(5):
                start = time.perf_counter()
                step(collect)
                times[collect].append((time.perf_counter() - start) * 1000)
    with_ms, without_ms = statistics.median(times[True]), statistics.median(times[False])
    return {"with_ms": with_ms, "without_ms": without_ms, "gc_ms": with_ms - without_ms}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--by-hand", type=int, default=0, metavar="ROUNDS")
    args = parser.parse_args()
    if args.by_hand:
        print(json.dumps(by_hand(args.by_hand)))
        return
    for _ in range(args.steps):
        step(collect=True)


if __name__ == "__main__":
    main()
