"""Per-step cost of a Booster with everything off, against the raw PyTorch loop.

Both loops train the same small MLP on the same in-memory batches, in one process,
interleaved (raw booster, booster raw, ...) so that machine drift and the order within a
round hit both alike.
Each round times ``--steps`` steps of each loop; the table reports the median per-step
time of each and the median of the per-round ratios (booster / raw).

    python benchmarks/overhead.py [--rounds 30] [--steps 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
from rich.console import Console
from rich.table import Table
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchboost
from _machine import machine_line
from torchboost import BoostConfig


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def _loader(batches: int, batch_size: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    n = batches * batch_size
    data = TensorDataset(torch.randn(n, 256, generator=g), torch.randint(0, 10, (n,), generator=g))
    return DataLoader(data, batch_size=batch_size, shuffle=True, generator=g)


def _time_raw(model, optimizer, loader, loss_fn) -> float:
    start = time.perf_counter()
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return time.perf_counter() - start


def _time_booster(booster, model, optimizer, loader, loss_fn) -> float:
    start = time.perf_counter()
    for x, y in loader:
        with booster.autocast():
            loss = loss_fn(model(x), y)
        booster.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=100, help="steps per loop per round")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)

    loss_fn = nn.CrossEntropyLoss()
    # One model, optimizer and DataLoader serve both loops: the Booster(off) loop uses the
    # prepared wrappers around the very same objects, so the only difference measured is
    # torchboost's own code (not two models' memory placement).
    raw_model = _model()
    raw_opt = torch.optim.AdamW(raw_model.parameters(), lr=1e-3)
    raw_loader = _loader(args.steps, args.batch_size)
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    b_model, b_opt, b_loader = booster.prepare(raw_model, raw_opt, raw_loader)

    # Warm-up round, not counted: first-touch allocations and kernel selection.
    _time_raw(raw_model, raw_opt, raw_loader, loss_fn)
    _time_booster(booster, b_model, b_opt, b_loader, loss_fn)

    raw_ms, boost_ms, ratios = [], [], []
    for i in range(args.rounds):
        # A B, then B A: whichever loop runs second in a round does not always get the
        # same (warmer or colder) machine.
        if i % 2 == 0:
            r = _time_raw(raw_model, raw_opt, raw_loader, loss_fn)
            b = _time_booster(booster, b_model, b_opt, b_loader, loss_fn)
        else:
            b = _time_booster(booster, b_model, b_opt, b_loader, loss_fn)
            r = _time_raw(raw_model, raw_opt, raw_loader, loss_fn)
        raw_ms.append(1e3 * r / args.steps)
        boost_ms.append(1e3 * b / args.steps)
        ratios.append(b / r)

    result = {
        "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                    "cpu_cores": torchboost.probe().cpu_cores},
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "raw_step_ms_median": statistics.median(raw_ms),
        "booster_off_step_ms_median": statistics.median(boost_ms),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }
    table = Table(title="Booster(off) overhead per step, small MLP (batch %d)" % args.batch_size)
    for col in ("loop", "median ms/step", "ratio to raw: median (min-max)"):
        table.add_column(col)
    table.add_row("raw PyTorch", f"{result['raw_step_ms_median']:.3f}", "1.000")
    table.add_row(
        "Booster(off)",
        f"{result['booster_off_step_ms_median']:.3f}",
        f"{result['ratio_median']:.3f} ({result['ratio_min']:.3f}-{result['ratio_max']:.3f})",
    )
    Console().print(machine_line())
    Console().print(table)
    Console().print(f"load at the end {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
