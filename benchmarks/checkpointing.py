"""What activation checkpointing costs and saves, on the built-in GPT workload.

Two figures of memory and one of time, each for plain PyTorch (the Booster with
everything off) against ``[checkpointing] scope = "blocks"`` on the same model, seed and
batches:

* saved activations: the bytes autograd keeps for backward during one step's forward
  (counted exactly with ``torch.autograd.graph.saved_tensors_hooks``); this is what
  checkpointing shrinks;
* peak memory of the whole training process: each variant runs in its own process
  (``python -m torchboost.workloads.gpt --booster`` with a ``torchboost.toml``), and the
  peak is its RSS (``ru_maxrss``, measured before this process grows: a forked child
  counts its parent's pages until it execs) on a CPU, ``torch.cuda.max_memory_allocated``
  on CUDA;
* step time: in one process, interleaved rounds (plain, checkpointed, plain, ...), the
  median of the per-round ratios.

    python benchmarks/checkpointing.py [--size small] [--batch 32] [--rounds 5] [--steps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

import torchboost
from torchboost import BoostConfig
from torchboost.workloads import gpt

VARIANTS = {"plain": BoostConfig.off(),
            "checkpointed": BoostConfig.off().replace(checkpointing={"scope": "blocks"})}


class _Run:
    """One prepared Booster training of the GPT workload on fixed batches."""

    def __init__(self, config: BoostConfig, size: str, batch: int, device: str) -> None:
        work = gpt.build(size, batch_size=batch)
        self.booster = torchboost.Booster(config, device=device, verbose=False)
        self.model, self.optimizer = self.booster.prepare(work.model, work.make_optimizer(work.model.parameters()))
        samples = [work.dataset[i] for i in range(batch)]
        self.x = torch.stack([s[0] for s in samples]).to(device)
        self.y = torch.stack([s[1] for s in samples]).to(device)
        self.loss_fn = work.loss_fn

    def step(self) -> None:
        loss = self.loss_fn(self.model(self.x), self.y)
        self.booster.backward(loss)
        self.optimizer.step()
        self.optimizer.zero_grad()

    def saved_bytes(self) -> int:
        saved = [0]

        def pack(t: torch.Tensor) -> torch.Tensor:
            saved[0] += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = self.loss_fn(self.model(self.x), self.y)
        loss.backward()
        self.optimizer.zero_grad()
        return saved[0]


def _timed(run: _Run, steps: int, device: str) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        run.step()
    if device == "cuda":
        torch.cuda.synchronize()  # the steps' device work is part of their time
    return (time.perf_counter() - start) * 1000 / steps


def _peak_bytes(config: BoostConfig, size: str, batch: int, steps: int) -> int:
    """Peak RSS (bytes) of a whole training process with ``config``, its own process."""
    with tempfile.TemporaryDirectory() as folder:
        config.to_toml(Path(folder) / "torchboost.toml")
        proc = subprocess.Popen([sys.executable, "-m", "torchboost.workloads.gpt", "--size", size, "--batch-size",
                                 str(batch), "--steps", str(steps), "--booster", "--log-every", "1000"],
                                cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the {size} GPT run failed (exit {os.waitstatus_to_exitcode(status)})")
        return int(usage.ru_maxrss * 1024)


def _measure(args: argparse.Namespace, device: str) -> dict[str, dict[str, float]]:
    # The whole-process peaks first: a child forked from this process counts this
    # process's pages in its own peak until it execs, so this one must still be small.
    peaks = {} if device == "cuda" else {name: _peak_bytes(config, args.size, args.batch, args.steps)
                                          for name, config in VARIANTS.items()}
    runs = {name: _Run(config, args.size, args.batch, device) for name, config in VARIANTS.items()}
    out: dict[str, dict[str, float]] = {name: {"saved": run.saved_bytes(), "ms": []} for name, run in runs.items()}
    for run in runs.values():
        run.step()  # warm-up
    for _ in range(args.rounds):
        for name, run in runs.items():
            out[name]["ms"].append(_timed(run, args.steps, device))
    for name in VARIANTS:
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            runs[name].step()
            peaks[name] = torch.cuda.max_memory_allocated()
        out[name]["peak"] = peaks[name]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="small", choices=list(gpt.SHAPES))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = _measure(args, device)
    base = out["plain"]
    ratios = [c / p for c, p in zip(out["checkpointed"]["ms"], base["ms"])]
    table = Table(title=f"activation checkpointing, GPT {args.size}, batch {args.batch}, {device}")
    for column in ("variant", "saved activations MiB", "peak memory MiB", "median step ms", "step time ratio"):
        table.add_column(column, justify="right")
    for name, row in out.items():
        ratio = f"{statistics.median(ratios):.2f}" if name == "checkpointed" else "1.00"
        table.add_row(name, f"{row['saved'] / 2**20:.1f}", f"{row['peak'] / 2**20:.0f}",
                      f"{statistics.median(row['ms']):.1f}", ratio)
    Console().print(table)
    cut = 1 - out["checkpointed"]["saved"] / base["saved"]
    Console().print(f"saved activations cut by {cut:.0%}; peak memory "
                    f"{out['checkpointed']['peak'] / base['peak'] - 1:+.0%}; per-round ratios "
                    + " ".join(f"{r:.2f}" for r in ratios))


if __name__ == "__main__":
    main()
