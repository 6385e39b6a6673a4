"""Per-step cost of the doctor's instrumentation outside the profiler window.

Runs the same small training loop in this process not observed, observed as the doctor
observes (its line sampler on) and as a tuning trial is (no line sampler), in interleaved
blocks (the order reversing each round), and prints the median time per step of each and
the overheads. The profiler window is off (it is bounded to a few
steps and its cost is accepted); everything else the observer does per step is on:
hooks, step accounting, progress file and throttled facts.json rewrites.

    python benchmarks/doctor_overhead.py [--rounds 15] [--steps 40] [--threads 1]

Each step is timed twice: wall clock, and CPU time of the training thread
(``time.thread_time``). With one intra-op thread (the default here) all of a step's
work runs on that thread, so its CPU time is the step's cost even on a busy shared
machine where wall times swing with other processes; the instrumentation's cost is
CPU work on that same thread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from _machine import machine_line
from torchboost.observe import Instrumentation, ObserveSpec, StepRecorder

WORKLOADS = {
    # name: (layers, width, batch) - a wide shallow MLP and a deep narrow one (many modules
    # per forward, the worst case for per-module hooks).
    "mlp 3x256, batch 64": (3, 256, 64),
    "mlp 24x64, batch 32": (24, 64, 32),
}


def _build(layers: int, width: int, batch: int):
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*blocks, nn.Linear(width, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = TensorDataset(torch.randn(batch * 64, width), torch.randn(batch * 64, 1))
    loader = DataLoader(data, batch_size=batch, shuffle=True)
    return model, optimizer, loader


def _block(model, optimizer, loader, steps: int) -> tuple[list[float], list[float]]:
    """Per-step (wall ms, thread-CPU ms) over one block of ``steps`` steps."""
    wall, cpu = [], []
    it = iter(loader)
    start, start_cpu = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        now, now_cpu = time.perf_counter(), time.thread_time()
        wall.append((now - start) * 1000.0)
        cpu.append((now_cpu - start_cpu) * 1000.0)
        start, start_cpu = now, now_cpu
    return wall, cpu


VARIANTS = {"plain": None, "observed": 10.0, "observed, no line sampler": "off"}
"""Each way a block runs: not observed; observed as the doctor observes (its line sampler
looking every 10 ms); observed as a tuning trial is (no line sampler)."""


def measure(name: str, rounds: int, steps: int, out_dir: str) -> dict[str, float]:
    """Median ms/step of each of :data:`VARIANTS`, wall and thread-CPU, over all blocks' steps."""
    model, optimizer, loader = _build(*WORKLOADS[name])
    _block(model, optimizer, loader, steps)  # warm-up: first-call costs
    samples: dict[str, list[float]] = {f"{key} {clock}": [] for key in VARIANTS for clock in ("wall", "cpu")}
    for r in range(rounds):
        for key in (list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))):
            lines = VARIANTS[key]
            if lines is None:
                wall, cpu = _block(model, optimizer, loader, steps)
            else:
                spec = ObserveSpec(out_dir=out_dir, steps=10**9, warmup=0, full=True, profile_active=0,
                                   progress_path=f"{out_dir}/progress.json",
                                   line_sample_ms=None if lines == "off" else lines)
                with Instrumentation(StepRecorder(spec)):
                    wall, cpu = _block(model, optimizer, loader, steps)
            samples[f"{key} wall"] += wall
            samples[f"{key} cpu"] += cpu
    return {key: statistics.median(values) for key, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="A/B block pairs per workload")
    parser.add_argument("--steps", type=int, default=40, help="training steps per block")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_line())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op thread(s), "
          f"{args.rounds} rounds x {args.steps} steps, interleaved A/B, medians of all steps")
    print(f"{'workload':<22} {'clock':<5} {'plain ms/step':>13} {'observed':>9} {'overhead':>9} "
          f"{'no line sampler':>16} {'overhead':>9}")
    with tempfile.TemporaryDirectory() as out_dir:
        for name in WORKLOADS:
            m = measure(name, args.rounds, args.steps, out_dir)
            for clock in ("cpu", "wall"):
                plain, observed, unsampled = (m[f"{key} {clock}"] for key in VARIANTS)
                print(f"{name:<22} {clock:<5} {plain:>13.3f} {observed:>9.3f} {100 * (observed / plain - 1):>+8.1f}% "
                      f"{unsampled:>16.3f} {100 * (unsampled / plain - 1):>+8.1f}%")
    print(f"load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
