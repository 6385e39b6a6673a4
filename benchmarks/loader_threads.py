"""Loader workers vs intra-op threads on this machine's cores: the measurement behind ``auto``.

Trains a small CNN on CPU with two synthetic workloads, one where preparing each batch
dominates the step ("loader-bound") and one where the model does ("compute-bound"),
under several (num_workers, intra-op threads) pairs. Runs are interleaved (every pair
once per round, several rounds) and the table shows median milliseconds per step and
the speed-up over the plain default (0 workers, torch's default threads). The row
marked ``auto`` is what torchboost's rule picks on this machine for CPU training.

    python benchmarks/loader_threads.py            # about 2 minutes on 2 cores
    python benchmarks/loader_threads.py --rounds 5 --steps 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from torchboost.env import probe
from torchboost.techniques.cpu import auto_threads
from torchboost.techniques.loader import auto_num_workers


class Synthetic(Dataset):
    """Images made on the fly; ``work`` rounds of blurring per sample stand for decoding and
    augmentation (the part that runs in loader workers)."""

    def __init__(self, n: int, size: int, work: int):
        self.n, self.size, self.work = n, size, work
        self.kernel = torch.full((3, 1, 3, 3), 1 / 9)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        x = torch.rand(1, 3, self.size, self.size, generator=g)
        for _ in range(self.work):
            x = nn.functional.conv2d(x, self.kernel, padding=1, groups=3)
        return x[0], i % 10


def make_model(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(width * 16, 10),
    )


WORKLOADS = {
    # name: (dataset work per sample, model width)
    "loader-bound": (12, 16),
    "compute-bound": (1, 64),
}


def measure(workload: str, workers: int, threads: int, steps: int, batch: int) -> float:
    """One run: mean ms per step over ``steps`` steps, after 2 warm-up steps."""
    work, width = WORKLOADS[workload]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = make_model(width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        Synthetic(batch * (steps + 2), 32, work), batch_size=batch, shuffle=True, num_workers=workers
    )
    it = iter(loader)
    for i in range(steps + 2):
        if i == 2:  # workers started and first batches in flight: start the clock
            start = time.perf_counter()
        x, y = next(it)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    elapsed = time.perf_counter() - start
    del it
    return elapsed / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    env = probe()
    default_threads = torch.get_num_threads()
    cores = env.cpu_cores
    auto_w, _ = auto_num_workers(cpu_cores=cores, ram_available_bytes=env.ram_available_bytes, device_type="cpu")
    auto_t, _ = auto_threads(cpu_cores=cores, workers=auto_w, device_type="cpu", current_threads=default_threads)
    auto_pair = (auto_w, auto_t or default_threads)
    pairs = sorted({(0, default_threads), (1, default_threads), (auto_w, default_threads), auto_pair, (0, 1)})

    load_before = os.getloadavg()[0]
    times: dict[tuple[str, int, int], list[float]] = {}
    for _ in range(args.rounds):
        for workload in WORKLOADS:
            for workers, threads in pairs:
                ms = measure(workload, workers, threads, args.steps, args.batch)
                times.setdefault((workload, workers, threads), []).append(ms)
    torch.set_num_threads(default_threads)

    print(f"{cores} cores, torch {torch.__version__}, default threads {default_threads}, "
          f"{args.rounds} rounds x {args.steps} steps, batch {args.batch}; "
          f"1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after "
          "(other processes on the cores distort every row)")
    print(f"| workload | workers | threads | ms/step (median) | vs 0 workers/{default_threads} threads | |")
    print("|---|---:|---:|---:|---:|---|")
    for workload in WORKLOADS:
        base = statistics.median(times[(workload, 0, default_threads)])
        for workers, threads in pairs:
            ms = statistics.median(times[(workload, workers, threads)])
            mark = "auto" if (workers, threads) == auto_pair else ""
            print(f"| {workload} | {workers} | {threads} | {ms:.1f} | {base / ms:.2f}x | {mark} |")


if __name__ == "__main__":
    main()
