"""The honest cost of gradient accumulation: one batch of B against K micro-batches of B/K.

Both variants train the same MLP through the Booster (fp32, everything else off), in one
process, interleaved (one batch, K micro-batches, one batch, ...) so machine drift hits
both alike. Each round times ``--steps`` optimizer steps of each; the table reports the
median throughput (samples/s) of each variant, the median of the per-round ratios, and
the peak memory: on CUDA ``torch.cuda.max_memory_allocated`` for one step, on the CPU the
bytes of activations saved for backward in one micro-step (counted with
``torch.autograd.graph.saved_tensors_hooks``), since the process's RSS does not shrink.
Accumulation trades speed for memory: fewer samples per kernel, same gradient.

    python benchmarks/accumulation.py [--batch 256] [--ks 1 2 4 8] [--rounds 7] [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from rich.console import Console
from rich.table import Table
from torch import nn

import torchboost
from _machine import machine_line
from torchboost import BoostConfig

WIDTH = 1024


def _model(device: torch.device) -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(256, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, 10)]
    return nn.Sequential(*layers).to(device)


class _Setup:
    """One prepared Booster training with ``k`` micro-batches of ``batch // k`` per step."""

    def __init__(self, k: int, batch: int, device: torch.device) -> None:
        self.k, self.micro = k, batch // k
        model = _model(device)
        config = BoostConfig.off().replace(accumulation={"steps": k})
        self.booster = torchboost.Booster(config, device=device, verbose=False)
        self.model, self.optimizer = self.booster.prepare(model, torch.optim.SGD(model.parameters(), lr=1e-3))
        g = torch.Generator(device="cpu").manual_seed(1)
        self.x = torch.randn(batch, 256, generator=g).to(device)
        self.y = torch.randint(0, 10, (batch,), generator=g).to(device)
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self) -> None:
        for i in range(self.k):
            xs = self.x[i * self.micro:(i + 1) * self.micro]
            ys = self.y[i * self.micro:(i + 1) * self.micro]
            with self.booster.accumulate(self.model, num_samples=self.micro):
                loss = self.loss_fn(self.model(xs), ys)
                self.booster.backward(loss)
                self.optimizer.step()
                self.optimizer.zero_grad()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # host-device sync: timing needs the kernels done


def _time(setup: _Setup, steps: int, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        setup.step()
    _sync(device)
    return time.perf_counter() - start


def _peak_bytes(setup: _Setup, device: torch.device) -> int:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        setup.step()
        _sync(device)
        return torch.cuda.max_memory_allocated(device)
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        xs, ys = setup.x[: setup.micro], setup.y[: setup.micro]
        setup.loss_fn(setup.model(xs), ys).backward()
    setup.optimizer.optimizer.zero_grad()
    return saved[0]


def run(device: torch.device, batch: int, ks: list[int], rounds: int, steps: int) -> Table:
    setups = {k: _Setup(k, batch, device) for k in ks}
    for s in setups.values():
        _time(s, 2, device)  # warm-up: allocator, kernels
    times: dict[int, list[float]] = {k: [] for k in ks}
    for round_ in range(rounds):
        for k in ks if round_ % 2 == 0 else ks[::-1]:  # interleaved, the order alternating
            times[k].append(_time(setups[k], steps, device))
    base = ks[0]
    what = "CUDA peak allocated" if device.type == "cuda" else "saved activations"
    table = Table(title=f"accumulation on {device.type}: batch {batch}, {steps} steps x {rounds} rounds")
    for col in ("variant", "samples/s (median)", f"speed vs K={base}: median of rounds (range)",
                "ratio of the medians", f"{what} (MiB)"):
        table.add_column(col, justify="right")
    for k in ks:
        ratios = [b / t for b, t in zip(times[base], times[k])]
        throughput = batch * steps / statistics.median(times[k])
        of_medians = statistics.median(times[base]) / statistics.median(times[k])
        peak = _peak_bytes(setups[k], device) / 2**20
        table.add_row(f"K={k} x {batch // k}", f"{throughput:,.0f}",
                      f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})", f"{of_medians:.2f}",
                      f"{peak:.1f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256, help="samples per optimizer step (B)")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 4, 8], help="micro-batches per step")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10, help="optimizer steps timed per round")
    args = parser.parse_args()
    if any(args.batch % k for k in args.ks):
        parser.error(f"--batch {args.batch} must divide by every K in {args.ks}")
    console = Console()
    console.print(machine_line())
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    for device in devices:
        console.print(run(device, args.batch, args.ks, args.rounds, args.steps))
    console.print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
