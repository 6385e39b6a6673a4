"""Slow storage told from slow CPU: the doctor's worker count and figure against workers timed by hand.

    python benchmarks/slow_storage.py [--rounds 5] [--steps 60]
    python benchmarks/slow_storage.py --tune [--budget 600]

The script is ``benchmarks/shapes/slow_storage.py``: a map-style dataset whose samples each
wait 4 ms off the CPU (a read from slow storage), batch 32, a small MLP, loaded in the
training process (``num_workers=0``). Measured two ways, round by round, so that a
neighbour's load falls on both alike:

* the doctor: ``torchboost doctor --json -- python slow_storage.py --steps 300``, its
  ``data.workers`` finding: the cause in its title, the worker count it proposes, its figure;
* by hand, right after it: the same model, optimizer and dataset with 0, 1, 2, 4, 8 and 16
  loader workers and the doctor's count (persistent, the first ``2 w + 3`` batches
  untimed, while the workers start), the mean time per step over ``--steps`` steps (times
  ``w / 4`` from 8 workers on, so that every count is timed over a second or more), each
  count in a process of its own, in a rotated order each round.

The table gives each count's median step and its speedup over 0 workers, then each round's
doctor figure against the hand's speedup (0 workers over the doctor's count) in the same
round. ``--tune`` runs ``torchboost tune --json`` on the same script and prints what it
kept and its end-to-end check, and keeps its folder (the report). Every command runs in a
folder of its own (the script copied there), so the write guard of the doctor and tune
sees only what they make.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _machine import cpu_model

HERE = Path(__file__).resolve().parent
SHAPE = HERE / "shapes" / "slow_storage.py"
COUNTS = (0, 1, 2, 4, 8, 16)
SCRIPT_STEPS = 300



def by_hand(workers: int, steps: int) -> float:
    """Mean ms per step of the shape's loop with ``workers`` loader workers, after its workers
    have handed over their first batches."""
    from torch import nn

    sys.path.insert(0, str(SHAPE.parent))
    from slow_storage import build  # noqa: E402  (the shape itself, as the script builds it)

    warm = 2 * workers + 3
    model, optimizer, loader = build(warm + steps, num_workers=workers, persistent_workers=workers > 0)
    batches = iter(loader)
    for i in range(warm + steps):
        if i == warm:
            start = time.perf_counter()
        x, y = next(batches)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / steps * 1000


def _private_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="slow-storage-"))
    shutil.copy(SHAPE, folder / SHAPE.name)
    return folder


def doctor() -> dict:
    """The doctor's ``data.workers`` finding on the script (title, proposed workers, figure)."""
    folder = _private_folder()
    try:
        out = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--json", "--out", "report", "--",
                              sys.executable, SHAPE.name, "--steps", str(SCRIPT_STEPS)],
                             cwd=folder, capture_output=True, text=True, timeout=900, check=True)
        report = json.loads(out.stdout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    findings = report["findings"]
    found = next((f for f in findings if f["id"] == "data.workers"), None)
    return {"top": findings[0]["id"] if findings else None, "title": found["title"] if found else "",
            "workers": found["evidence"]["suggested_num_workers"] if found else None,
            "speedup": found["expected_speedup"] if found else None,
            "off_cpu_pct": found["evidence"].get("sample_off_cpu_pct") if found else None}


def tune(budget: int) -> None:
    """``torchboost tune`` on the script: what it kept and how it verified it."""
    folder = _private_folder()
    command = [sys.executable, "-m", "torchboost.cli", "tune", "--json", "--budget", str(budget), "--",
               sys.executable, SHAPE.name, "--steps", str(SCRIPT_STEPS)]
    print(f"$ (in a folder of its own) torchboost tune --json --budget {budget} -- python {SHAPE.name} "
          f"--steps {SCRIPT_STEPS}", flush=True)
    started = time.perf_counter()
    out = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=4 * budget + 600)
    print(f"exit {out.returncode} after {time.perf_counter() - started:.0f} s")
    print(out.stderr[-8000:])
    report = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
    print(json.dumps({key: report.get(key) for key in ("kept", "end_to_end", "settings", "verdict") if key in report},
                     indent=1)[:4000])
    toml = folder / "torchboost.toml"
    print(toml.read_text() if toml.exists() else "(no torchboost.toml written)")
    print(f"tune's folder, kept: {folder}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per count per round, by hand")
    parser.add_argument("--tune", action="store_true", help="run torchboost tune on the script instead")
    parser.add_argument("--budget", type=int, default=600, help="tune's --budget, seconds")
    parser.add_argument("--by-hand", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.by_hand is not None:
        print(json.dumps(by_hand(args.by_hand, args.steps)))
        return
    print(f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the start")
    if args.tune:
        tune(args.budget)
        return
    hand, rounds = _rounds(args.rounds, args.steps)
    _tables(hand, rounds)


def _rounds(count: int, steps: int) -> tuple[dict[int, list[float]], list[tuple[dict, float | None]]]:
    """Each round: the doctor, then every count by hand; the hand's ms per count, and each
    round's doctor finding with the hand's speedup at its count."""
    hand: dict[int, list[float]] = {}
    rounds = []
    for i in range(count):
        found = doctor()  # first, so that its count is timed by hand in the same round
        counts = sorted(set(COUNTS) | ({found["workers"]} if found["workers"] else set()))
        order = counts[i % len(counts):] + counts[:i % len(counts)]
        mine = {}
        for workers in order:  # each count in a process of its own, as a script would run it
            mine[workers] = _by_hand_run(workers, steps * max(1, workers // 4))  # a second or more at every count
            hand.setdefault(workers, []).append(mine[workers])
        hand_x = mine[0] / mine[found["workers"]] if found["workers"] in mine else None
        rounds.append((found, hand_x))
        print(f"round {i + 1}: doctor: top {found['top']}, {found['workers']} workers, x{found['speedup'] or 0:.2f}, "
              f"off the CPU {found['off_cpu_pct']}%; by hand " + ", ".join(f"{w}: {mine[w]:.1f}" for w in counts) +
              f" ms" + (f", x{hand_x:.2f} at the doctor's count" if hand_x else "") +
              f"; load {os.getloadavg()[0]:.1f}", flush=True)
    return hand, rounds


def _by_hand_run(workers: int, steps: int) -> float:
    """:func:`by_hand` in a process of its own; a run that fails is said, and run again once."""
    for attempt in (1, 2):
        out = subprocess.run([sys.executable, __file__, "--by-hand", str(workers), "--steps", str(steps)],
                             capture_output=True, text=True, timeout=900)
        if out.returncode == 0:
            return json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  by hand, {workers} workers, attempt {attempt}: exit {out.returncode}: {out.stderr.strip()[-600:]}")
    raise RuntimeError(f"the by-hand run with {workers} workers failed twice")


def _tables(hand: dict[int, list[float]], rounds: list[tuple[dict, float | None]]) -> None:
    base = statistics.median(hand[0])
    print(f"\n| workers | ms/step (median) | rounds | vs 0 workers |\n|---:|---:|---:|---:|")
    for workers in sorted(hand):
        ms = statistics.median(hand[workers])
        print(f"| {workers} | {ms:.1f} | {len(hand[workers])} | x{base / ms:.2f} |")
    print("\n| round | doctor's top finding | off the CPU | workers | doctor | by hand, same round | doctor / hand |\n"
          "|---:|---|---:|---:|---:|---:|---:|")
    ratios = []
    for i, (found, hand_x) in enumerate(rounds, 1):
        ratio = found["speedup"] / hand_x if found["speedup"] and hand_x else None
        ratios += [ratio] if ratio else []
        print(f"| {i} | {found['top']} | {found['off_cpu_pct']}% | {found['workers']} | x{found['speedup'] or 0:.2f} | "
              + (f"x{hand_x:.2f} | {ratio:.2f} |" if ratio else "n/a | n/a |"))
    if ratios:
        print(f"| median | | | | | | {statistics.median(ratios):.2f} |")
    print(f"\nthe doctor's title (last round): {rounds[-1][0]['title']}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
