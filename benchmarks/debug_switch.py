"""Anomaly detection left on: the doctor's measured ratio against one taken by hand, on one script.

    python benchmarks/debug_switch.py [--rounds 5] [--pairs 40] [--script tests/scripts/debug_anomaly.py]

The script (a plain MLP with ``torch.autograd.set_detect_anomaly(True)`` at its top) is
measured two ways, the rounds interleaved so that a neighbour's load falls on both alike:

* by hand: the script runs in a child process of this file (``--by-hand``) with a global
  optimizer-step hook that times each step and turns anomaly detection off for every other
  one; after a warm-up, each pair is a step with it on beside a step with it off, and the
  ratio is the median over the pairs of on / off;
* the doctor: ``torchboost doctor --json -- python SCRIPT``, whose quick probe times the
  same switch (``debug.anomaly``'s measured ratio).

It prints a row per round, the medians, the doctor's over the hand's, and the CPU model.
"""

from __future__ import annotations

import argparse
import json
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import cpu_model

ROOT = Path(__file__).resolve().parents[1]
WARMUP_STEPS = 10



def by_hand(script: str, pairs: int) -> None:
    """Run ``script`` here with anomaly detection switched off every other step; print the
    median on/off ratio of its pairs as JSON."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    times: list[float] = []
    last = [0.0]

    def after_step(optimizer, args, kwargs) -> None:
        now = time.perf_counter()
        if last[0]:
            times.append(now - last[0])
        last[0] = now
        # The next step is timed as times[len(times)]: even ones as the script set it (on), odd ones off.
        torch.set_anomaly_enabled(len(times) < WARMUP_STEPS or len(times) % 2 == 0)

    register_optimizer_step_post_hook(after_step)
    sys.argv = [script, "--steps", str(WARMUP_STEPS + 2 * pairs + 2)]
    runpy.run_path(script, run_name="__main__")
    timed = times[WARMUP_STEPS:]
    on, off = timed[0::2], timed[1::2]
    ratios = [a / b for a, b in zip(on, off)]
    print(json.dumps({"ratio": statistics.median(ratios), "pairs": len(ratios),
                      "on_ms": 1000 * statistics.median(on), "off_ms": 1000 * statistics.median(off)}))


def _hand_round(script: str, pairs: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--by-hand", "--script", script, "--pairs", str(pairs)],
                         check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _doctor_round(script: str) -> float | None:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "8", "--warmup", "3",
                              "--out", str(Path(tmp) / "report"), "--json", "--", sys.executable, script],
                             check=True, capture_output=True, text=True, timeout=600, cwd=tmp)
    found = next((f for f in json.loads(out.stdout)["findings"] if f["id"] == "debug.anomaly"), None)
    return found["measured"]["ratio"] if found and found.get("measured") else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", default=str(ROOT / "tests" / "scripts" / "debug_anomaly.py"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=40, help="pairs of steps per by-hand round")
    parser.add_argument("--by-hand", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.by_hand:
        by_hand(args.script, args.pairs)
        return
    print(f"CPU: {cpu_model()}; script: {Path(args.script).name}")
    print(f"{'round':>5}  {'on ms':>7}  {'off ms':>7}  {'by hand':>8}  {'doctor':>7}  {'doctor / hand':>13}")
    hands, doctors = [], []
    for i in range(1, args.rounds + 1):
        hand = _hand_round(args.script, args.pairs)
        doctor = _doctor_round(args.script)
        hands.append(hand["ratio"])
        if doctor is not None:
            doctors.append(doctor)
        shown = f"x{doctor:.2f}" if doctor is not None else "n/a"
        versus = f"{doctor / hand['ratio']:.2f}" if doctor is not None else "n/a"
        print(f"{i:>5}  {hand['on_ms']:>7.2f}  {hand['off_ms']:>7.2f}  {'x%.2f' % hand['ratio']:>8}  {shown:>7}  "
              f"{versus:>13}")
    hand_median = statistics.median(hands)
    doctor_median = statistics.median(doctors) if doctors else float("nan")
    print(f"{'median':>5}  {'':>7}  {'':>7}  {'x%.2f' % hand_median:>8}  {'x%.2f' % doctor_median:>7}  "
          f"{doctor_median / hand_median:>13.2f}")


if __name__ == "__main__":
    main()
