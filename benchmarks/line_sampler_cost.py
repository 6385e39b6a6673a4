"""What the doctor's line sampler costs a training step, and what the interpreter's own hook would.

    python benchmarks/line_sampler_cost.py [--rounds 9] [--steps 20]

Two loops the doctor is run on: the demo's built-in workload (``torchboost.workloads.vision``,
its tiny ResNet on augmented images, its own DataLoader, no workers) and nanoGPT's
shakespeare_char shape (``benchmarks/shapes/gpt_char.py``). Each is stepped in this one
process in rounds of ``--steps`` steps, interleaved: plain; with the line sampler looking at
this thread every 2, 5 and 10 ms (the doctor's interval is one of them); with
``sys.setprofile`` (the interpreter's own hook for every call and return, the other way to
see the user's lines on Python 3.11, which has no ``sys.monitoring``) calling a function that
does nothing. Medians of each round's ms a step; the ratios are to plain, per round then
median. Prints the CPU model and one row per loop and way.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from _machine import cpu_model
from torchboost.observe.record.line_sampler import LineSampler
from torchboost.workloads import vision
from torchboost.workloads._loop import make_loader

sys.path.insert(0, str(Path(__file__).resolve().parent / "shapes"))
import gpt_char  # noqa: E402

INTERVALS_MS = (2.0, 5.0, 10.0)
"""The sampler's intervals measured (the doctor's is ``INTERVAL_MS``)."""



def _vision() -> Callable[[], None]:
    workload = vision.build("tiny")
    optimizer = workload.make_optimizer(workload.model.parameters())
    batches = itertools.cycle(make_loader(workload))

    def step() -> None:
        x, y = next(batches)
        loss = workload.loss_fn(workload.model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _gpt() -> Callable[[], None]:
    model, optimizer, data = gpt_char.build()
    batches = itertools.cycle(data)

    def step() -> None:
        x, y = next(batches)
        gpt_char.loss(model, x, y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _round(step: Callable[[], None], steps: int, way: str) -> float:
    every = float(way.split()[-1]) if way.startswith("sampler") else None
    sampler = LineSampler(lambda: "other", interval_ms=every).start() if every else None
    if way == "setprofile":
        sys.setprofile(lambda frame, event, arg: None)
    try:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - start) * 1000 / steps
    finally:
        sys.setprofile(None)
        if sampler is not None:
            sampler.stop()


def measure(name: str, step: Callable[[], None], rounds: int, steps: int) -> list[str]:
    for _ in range(3):
        step()
    ways = ("plain", *(f"sampler every {every:g}" for every in INTERVALS_MS), "setprofile")
    ms: dict[str, list[float]] = {way: [] for way in ways}
    for r in range(rounds):
        for way in ways[r % len(ways):] + ways[:r % len(ways)]:  # each way first in turn
            ms[way].append(_round(step, steps, way))
    rows = []
    for way in ways:
        ratios = [a / b for a, b in zip(ms[way], ms["plain"])]
        rows.append(f"| {name} | {way} | {statistics.median(ms[way]):.2f} | {statistics.median(ratios):.3f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    print(f"CPU: {cpu_model()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| loop | way | ms a step (median) | against plain (median of rounds) |")
    print("|---|---|---:|---:|")
    for name, make in (("demo workload (vision, tiny)", _vision), ("nanoGPT shakespeare_char shape", _gpt)):
        for row in measure(name, make(), args.rounds, args.steps):
            print(row)


if __name__ == "__main__":
    main()
