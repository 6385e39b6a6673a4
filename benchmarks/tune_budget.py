"""Does tune end within 1.5x its --budget, beside another process's busy loop?

    python benchmarks/tune_budget.py [--shapes demo,gpt_char,lightning,slow5] [--budgets 40,60,120,300]
                                     [--busy yes|no]

For each script shape and budget, in a scratch folder of its own: ``torchboost tune
--budget B`` as a user runs it, with (``--busy yes``) a one-thread ``while True: pass`` in
another process for the whole tune, timed from outside as a whole process (what ``time``
shows). Prints one row a run: its wall time, that over the budget (the README promises at
most 1.5), its exit status (0 written, 3 no proven win, 4 unverified, other: failed) and
what its report says it kept.

Shapes: ``demo`` (the demo's vision workload, 400 steps), ``gpt_char`` (nanoGPT's
shakespeare_char shape, ``benchmarks/shapes/gpt_char.py``), ``lightning`` (a Lightning
``Trainer`` script, ``tests/scripts/lightning_train.py``, needs ``pip install lightning``),
``slow5`` (a script of 5 s steps).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from _machine import machine_line, timed_beside

ROOT = Path(__file__).resolve().parents[1]
SLOW5 = """\
import sys, time, torch
torch.manual_seed(0)
model = torch.nn.Linear(64, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 40):
    end = time.perf_counter() + 5.0
    while time.perf_counter() < end:  # five seconds of compute a step
        loss = model(torch.randn(256, 64)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
SHAPES = {
    "demo": [sys.executable, "-m", "torchboost.workloads.vision", "--size", "tiny", "--steps", "400"],
    "gpt_char": [sys.executable, str(ROOT / "benchmarks" / "shapes" / "gpt_char.py")],
    "lightning": [sys.executable, str(ROOT / "tests" / "scripts" / "lightning_train.py"), "200"],
    "slow5": [sys.executable, "slow5.py", "40"],
}


def tune_once(shape: str, budget: float, busy: bool) -> dict:
    """One tune in a new folder, timed from outside; the busy loop runs for all of it."""
    folder = Path(tempfile.mkdtemp(prefix=f"tune-budget-{shape}-"))
    (folder / "slow5.py").write_text(SLOW5)
    done, wall = timed_beside([sys.executable, "-m", "torchboost.cli", "tune", "--budget", str(budget), "--out", "out",
                               "--", *SHAPES[shape]], cwd=folder, loop="while True: pass" if busy else None)
    report = folder / "out" / "report.json"
    data = json.loads(report.read_text()) if report.exists() else {}
    last = (done.stderr.strip().splitlines() or [""])[-1]
    return {"shape": shape, "budget": budget, "wall_s": wall, "ratio": wall / budget, "exit": done.returncode,
            "status": data.get("status", "-"), "kept": ", ".join(f"{k}={v}" for k, v in data.get("settings", {}).items())
            or "-", "last": last[:160]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="demo,gpt_char,lightning,slow5")
    parser.add_argument("--budgets", default="40,60,120,300")
    parser.add_argument("--busy", choices=("yes", "no"), default="yes")
    args = parser.parse_args()
    print(machine_line())
    print(f"busy loop beside: {args.busy}")
    print("| shape | --budget | wall s | wall / budget | exit | status | kept |")
    print("|---|---:|---:|---:|---:|---|---|")
    rows = []
    for shape in args.shapes.split(","):
        for budget in (float(b) for b in args.budgets.split(",")):
            row = tune_once(shape, budget, args.busy == "yes")
            rows.append(row)
            print(f"| {shape} | {budget:g} | {row['wall_s']:.1f} | {row['ratio']:.2f} | {row['exit']} | "
                  f"{row['status']} | {row['kept']} |", flush=True)
            if row["exit"] not in (0, 3, 4):
                print(f"  (its last words: {row['last']})", flush=True)
    held = sum(r["ratio"] <= 1.5 for r in rows)
    print(f"within 1.5x its budget: {held} of {len(rows)}")


if __name__ == "__main__":
    main()
