"""What the doctor's FLOP and byte count costs: one counted step against the same step plain.

    python benchmarks/flop_count_cost.py [--workload gpt] [--size tiny] [--rounds 5]

The doctor counts FLOPs in one step it runs anyway (the profiler's warm-up step), so its
cost to the doctor's run is that step's extra time under the counters (FlopCounterMode
and the byte counter, as the doctor enters them: ``StepFlops``): printed here per
workload, with the FLOPs and bytes counted. Plain and counted steps alternate (A B A B ...), medians
of ``--rounds``; the ratio, not the absolute times, is what a shared machine lets one read.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time

from _mfu import one_step as _step
from torchboost.observe.probes.flop_count import StepFlops
from torchboost.workloads._loop import make_loader


def main(argv: list[str] | None = None) -> int:
    """Print the plain and counted step times of one workload, and the FLOPs counted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="gpt")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    workload = importlib.import_module(f"torchboost.workloads.{args.workload}").build(args.size)
    optimizer = workload.make_optimizer(workload.model.parameters())
    batch = next(iter(make_loader(workload)))
    _step(workload, optimizer, batch)  # warm-up
    plain, counted, counter = [], [], StepFlops()
    for _ in range(args.rounds):
        start = time.perf_counter()
        _step(workload, optimizer, batch)
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        counter = StepFlops()
        counter.start()
        _step(workload, optimizer, batch)
        counter.stop()
        counted.append(time.perf_counter() - start)
    a, b = statistics.median(plain) * 1000, statistics.median(counted) * 1000
    moved = sum(counter.bytes_by_op.values())
    print(f"{args.workload} {args.size}: {counter.flops or 0:.3e} FLOPs and at least {moved:.3e} bytes per step "
          f"(top ops); plain step {a:.1f} ms, counted {b:.1f} ms "
          f"(x{b / a:.2f}); the count adds {b - a:.1f} ms, once per doctor run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
