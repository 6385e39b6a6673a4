"""Tune each built-in workload with `torchboost tune` and keep the configs for bench.py.

    python benchmarks/tune_workloads.py [--workloads vision,mlp,data,gpt] [--budget 240]
        [--run-steps 2000] [--out benchmarks/configs] [--booster]

Writes OUT/WORKLOAD.toml (what `bench.py --config-dir OUT` gives the torchboost row) and
prints each tune's verdict lines and wall time. By default the workloads run unmodified
(plain PyTorch), so everything the tuner keeps it applied from outside the script. With
``--booster`` the tuned script is the workload's Booster loop (``--booster``), the loop
bench.py's torchboost row runs: then the levers only a Booster can apply (channels_last,
fp16, accumulation) are tried too.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="vision,mlp,data,gpt")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds per workload")
    parser.add_argument("--run-steps", type=int, default=2000, help="planned run length, for compile")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "configs"))
    parser.add_argument("--reports", default="tune-reports", help="folder for each tune's report")
    parser.add_argument("--booster", action="store_true", help="tune the workloads' Booster loop")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.workloads.split(","):
        start = time.monotonic()
        cmd = [sys.executable, "-m", "torchboost.cli", "tune", "--budget", str(args.budget),
               "--run-steps", str(args.run_steps), "--out", str(Path(args.reports) / name),
               "--config", str(out / f"{name}.toml"), "--",
               "python", "-m", f"torchboost.workloads.{name}", "--steps", str(args.run_steps),
               *(["--booster"] if args.booster else [])]
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.monotonic() - start
        print(f"== {name}: exit {done.returncode}, {wall:.0f} s")
        for line in done.stderr.splitlines():
            if line.strip().startswith(("kept", "slower", "not_", "unconfirmed", "incorrect", "failed", "skipped",
                                        "verified", "not kept")):
                print("  " + line.strip())
        if done.returncode not in (0, 3, 4):  # 3: no change proven faster, 4: unverified; results
            print(done.stderr[-2000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
