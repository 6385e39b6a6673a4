"""The doctor's top finding on scripts whose time goes to the user's own code, against a hand measure.

    python benchmarks/host_culprits.py [--rounds 3] [--hand-rounds 5]

Three shapes from ``benchmarks/shapes/`` (``histograms_every_step.py`` needs ``pip install
tensorboard``), each measured two ways per round, the rounds interleaved so that a
neighbour's load falls on both alike:

* ``gc_every_step.py``: ``gc.collect()`` after every step, 300k live objects. By hand: the
  step with and without the call, interleaved in one process, medians; the call's cost is
  their difference. The doctor: its top finding, and the line's ms a step it names.
* ``histograms_every_step.py``: a TensorBoard histogram of every parameter and gradient
  each step. By hand: the step with and without, as above. The doctor: as above.
* ``eval_with_grad.py``: evaluation every 10 steps over 4096 samples in batches of 16, in
  eval mode with gradients on. By hand: ten training steps, one evaluation, medians; the
  evaluation's share of the run. The doctor: its top finding and the share it gives.

Each run starts in a new folder of its own holding a copy of the script, so the doctor's
write guard watches that folder alone. Prints the CPU model and a row per round and shape:
the finding that names the cause and its rank among the doctor's findings (first on a quiet
machine; on a busy one the threads finding may rank above it), the line, the doctor's figure
against the hand's and their ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _machine import cpu_model

SHAPES = Path(__file__).resolve().parent / "shapes"



def _run(before: list[str], script: str, after: list[str]) -> subprocess.CompletedProcess:
    """``before + [script] + after`` in a new folder holding a copy of ``script``."""
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(SHAPES / script, Path(folder) / script)
        return subprocess.run([*before, script, *after], cwd=folder, capture_output=True, text=True, timeout=900)


def by_hand(script: str, rounds: int) -> dict:
    done = _run([sys.executable], script, ["--by-hand", str(rounds)])
    if done.returncode != 0:
        raise SystemExit(f"{script} --by-hand failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def doctor(script: str) -> dict:
    done = _run([sys.executable, "-m", "torchboost.cli", "doctor", "--json", "--", "python"], script, [])
    if done.returncode != 0:
        raise SystemExit(f"doctor on {script} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def _row(name: str, report: dict, finding_id: str, key: str, hand: float, unit: str) -> str:
    """The row of ``finding_id`` in ``report``: its rank, its line, its figure ``key`` against
    the hand's; a dash where the doctor made no such finding."""
    ranked = [f["id"] for f in report["findings"]]
    if finding_id not in ranked:
        return f"| {name} | `{finding_id}`: not found (top: {ranked[:3]}) | | | {hand:.1f} {unit} | |"
    found = report["findings"][ranked.index(finding_id)]
    figure = float(found["evidence"].get(key, 0.0))
    return (f"| {name} | `{finding_id}` #{ranked.index(finding_id) + 1} | {found['evidence'].get('line', '')} | "
            f"{figure:.1f} {unit} | {hand:.1f} {unit} | {figure / hand:.2f} |")


SHAPES_MEASURED = (
    ("gc.collect() every step", "gc_every_step.py", "host.gc", "line_ms_per_step", "gc_ms", "ms"),
    ("histograms every step", "histograms_every_step.py", "host.tracker", "line_ms_per_step", "histograms_ms", "ms"),
    ("evaluation every 10 steps", "eval_with_grad.py", "evaluation.often", "eval_pct", "eval_pct", "% of the run"),
)
"""(row name, script, the finding that names the cause, its figure, the hand's figure, unit)."""


def round_rows(hand_rounds: int) -> list[str]:
    rows = []
    for name, script, finding_id, key, hand_key, unit in SHAPES_MEASURED:
        hand = by_hand(script, hand_rounds)
        rows.append(_row(name, doctor(script), finding_id, key, hand[hand_key], unit))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hand-rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}")
    print("| script | the doctor's finding, its rank | line | doctor | by hand | doctor / hand |")
    print("|---|---|---|---:|---:|---:|")
    for _ in range(args.rounds):
        for row in round_rows(args.hand_rounds):
            print(row, flush=True)


if __name__ == "__main__":
    main()
