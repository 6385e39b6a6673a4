"""How loader workers hand batches over: torch's default against file_system.

    python benchmarks/worker_ipc.py [--workloads data,vision] [--workers 1,2] [--rounds 5] [--steps 200]

Each measurement is a fresh process running the workload's training loop through the
Booster (1 intra-op thread, persistent workers), the only difference being
``loader.sharing_strategy``; the two strategies alternate (A B, B A, ...) and the table
gives the median ms/step (the mean over the timed steps of each run) and the median of
the per-round ratios file_system / default.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from rich.console import Console
from rich.table import Table

STRATEGIES = ("keep", "file_system")


def child(workload: str, workers: int, strategy: str, steps: int, warmup: int) -> None:
    from torchboost import BoostConfig
    from torchboost.workloads import REGISTRY, train

    work = REGISTRY[workload].build("tiny")
    config = BoostConfig.off().replace(
        cpu={"threads": 1},
        loader={"num_workers": workers, "persistent_workers": True, "sharing_strategy": strategy},
    )
    result = train(work, steps=warmup + steps, warmup_steps=warmup, booster=True, config=config, log=None)
    print(json.dumps({"ms_per_step": 1e3 * result.batch_size / result.samples_per_s}))


def measure(workload: str, workers: int, strategy: str, steps: int, warmup: int) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", workload, str(workers), strategy, str(steps), str(warmup)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["ms_per_step"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="data,vision")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        workload, workers, strategy, steps, warmup = args.child
        child(workload, int(workers), strategy, int(steps), int(warmup))
        return 0
    console = Console()
    table = Table(title=f"Batch hand-over, {args.rounds} rounds x {args.steps} steps, A/B alternating")
    for col in ("workload", "workers", "default ms/step", "file_system ms/step", "file_system / default (min-max)"):
        table.add_column(col)
    for workload in args.workloads.split(","):
        for workers in (int(w) for w in args.workers.split(",")):
            times: dict[str, list[float]] = {s: [] for s in STRATEGIES}
            ratios = []
            for r in range(args.rounds):
                order = STRATEGIES if r % 2 == 0 else STRATEGIES[::-1]
                got = {s: measure(workload, workers, s, args.steps, args.warmup) for s in order}
                for s in STRATEGIES:
                    times[s].append(got[s])
                ratios.append(got["file_system"] / got["keep"])
                console.print(f"  {workload} {workers} workers round {r + 1}: "
                              f"default {got['keep']:.2f}, file_system {got['file_system']:.2f} ms/step",
                              highlight=False)
            table.add_row(workload, str(workers), f"{statistics.median(times['keep']):.2f}",
                          f"{statistics.median(times['file_system']):.2f}",
                          f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
