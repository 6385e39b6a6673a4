"""What timing each batch where it is made costs: the doctor's sample clock against the bare fetch.

    python benchmarks/sample_clock_cost.py [--rounds 7] [--batches 3000]

The doctor wraps the DataLoader's dataset fetchers (:mod:`torchboost.reach.sample_clock`):
each batch's making is timed, wall against CPU and the wait for a core, on every batch of
the observed steps. This loads ``--batches`` batches of 32 from a dataset that costs
nothing (each sample a tensor already made), in the training process, with the clock's
wrapper and without, the two interleaved round by round, and prints the median
microseconds per batch of each and their difference: the clock's cost per batch, which a
batch read from storage or decoded (milliseconds) dwarfs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset

from torchboost.reach.loader_patch import LoaderPatch
from torchboost.reach.sample_clock import FETCH_ATTRIBUTES, SampleClock

BATCH = 32


class _Free(Dataset):
    def __init__(self, n: int) -> None:
        self.item = torch.zeros(8)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.item


def _per_batch_us(batches: int, clocked: bool) -> float:
    loader = DataLoader(_Free(batches * BATCH), batch_size=BATCH)
    clock = SampleClock()
    patch = LoaderPatch({attr: clock.timed for attr in FETCH_ATTRIBUTES}) if clocked else None
    if patch is not None:
        patch.install()
        clock.iterating(loader)  # the training process's slot, as the observer's __iter__ sets it
    try:
        start = time.perf_counter()
        for _ in loader:
            pass
        return (time.perf_counter() - start) / batches * 1e6
    finally:
        if patch is not None:
            patch.uninstall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=3000)
    args = parser.parse_args()
    bare, clocked = [], []
    for i in range(args.rounds):
        for timed in ((False, True) if i % 2 == 0 else (True, False)):  # each side first every other round
            (clocked if timed else bare).append(_per_batch_us(args.batches, timed))
    b, c = statistics.median(bare), statistics.median(clocked)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{args.rounds} rounds x {args.batches} batches of {BATCH}")
    print("| fetch | us per batch (median) |")
    print("|---|---:|")
    print(f"| bare | {b:.1f} |")
    print(f"| with the sample clock | {c:.1f} |")
    print(f"| the clock's cost | {c - b:.1f} ({(c - b) / BATCH:.2f} per sample) |")


if __name__ == "__main__":
    main()
