"""What the doctor's bound says against a hand measure, on two steps no compute holds.

    python benchmarks/bound_shapes.py [--rounds 2] [--ddp-rounds 15] [--python-rounds 5]

Two shapes from ``benchmarks/shapes/``, each measured two ways, the rounds interleaved so
that a neighbour's load falls on both alike:

* ``ddp_allreduce.py`` (gloo, 2 ranks under torchrun, a 2048x2048 Linear, batch 2): by hand,
  the script's ``--by-hand`` times a DDP step, the same step under ``no_sync`` and an
  all-reduce of the gradients' size alone, interleaved, medians; the all-reduce's share is
  (step - no_sync step) / step. The doctor: ``torchboost doctor --json -- torchrun
  --standalone --nproc_per_node=2 ddp_allreduce.py``: its bound, and each rank's
  collectives with no compute beside them, a share of its profiled step.
* ``python_forward.py`` (a forward that smooths every element in plain Python): by hand,
  the forward's Python and its ops timed apart, medians; the doctor: ``torchboost doctor
  --steps 6 --warmup 2 --json -- python python_forward.py``: its bound, the forward's wall
  and ops in the profiler's window and the Python's share of the step.

Each run starts in a new folder of its own holding a copy of the script, so that the
doctor's write guard watches that folder alone. It prints a row per round and shape, and
the CPU model.
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
TORCHRUN = ["torchrun", "--standalone", "--nproc_per_node=2"]



def _in_own_folder(script: str, argv: list[str], launcher: list[str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(SHAPES / script, Path(folder) / script)
        cmd = [*launcher, script, *argv]
        return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=600)


def _last_json(proc: subprocess.CompletedProcess) -> dict:
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _doctor(script: str, launcher: list[str], doctor_args: list[str]) -> tuple[dict, list[dict]]:
    """The doctor's report.json and each rank's facts, run in a folder of their own."""
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(SHAPES / script, Path(folder) / script)
        out = Path(folder) / "report"
        cmd = [sys.executable, "-m", "torchboost.cli", "doctor", *doctor_args, "--out", str(out), "--json", "--",
               *launcher, script]
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"doctor failed ({proc.returncode}): {proc.stderr[-2000:]}")
        facts = [json.loads(p.read_text()) for p in sorted(out.glob("facts*.json"))]
        return json.loads(proc.stdout), facts


def ddp_round(hand_rounds: int) -> dict:
    hand = _last_json(_in_own_folder("ddp_allreduce.py", ["--by-hand", str(hand_rounds)], TORCHRUN))
    report, facts = _doctor("ddp_allreduce.py", TORCHRUN, [])
    ranks = {f["rank"]: f["profile"]["phases"]["step"] for f in facts}
    return {"hand_step_ms": hand["step_ms"], "hand_no_sync_step_ms": hand["no_sync_step_ms"],
            "hand_all_reduce_ms": hand["all_reduce_ms"],
            "hand_all_reduce_pct": 100 * (hand["step_ms"] - hand["no_sync_step_ms"]) / hand["step_ms"],
            "doctor_step_ms": report["step_time_ms"]["median"], "bound": report["headroom"]["bound"],
            "line": report["headroom"]["line"], "slowest_rank": report["job"]["slowest_rank"],
            "rank_exposed_pct": {r: 100 * s["collective_ms"] / s["wall_ms"] for r, s in sorted(ranks.items())},
            "findings": [f["id"] for f in report["findings"] + report.get("training_changes", [])]}


def python_round(hand_rounds: int) -> dict:
    hand = _last_json(_in_own_folder("python_forward.py", ["--by-hand", str(hand_rounds)], [sys.executable]))
    report, facts = _doctor("python_forward.py", [sys.executable], ["--steps", "6", "--warmup", "2"])
    forward = facts[0]["profile"]["phases"]["forward"]
    return {"hand_step_ms": hand["step_ms"], "hand_python_ms": hand["python_ms"],
            "hand_forward_ops_ms": hand["forward_ops_ms"], "hand_python_pct": 100 * hand["python_ms"] / hand["step_ms"],
            "doctor_step_ms": report["step_time_ms"]["median"], "bound": report["headroom"]["bound"],
            "line": report["headroom"]["line"], "forward_wall_ms": forward["wall_ms"],
            "forward_op_ms": forward["op_ms"],
            "findings": [f["id"] for f in report["findings"] + report.get("training_changes", [])]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ddp-rounds", type=int, default=15, help="interleaved rounds of the DDP hand measure")
    parser.add_argument("--python-rounds", type=int, default=5, help="steps of the Python-forward hand measure")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}")
    for i in range(1, args.rounds + 1):
        print(f"round {i} ddp_allreduce: {json.dumps(ddp_round(args.ddp_rounds))}", flush=True)
        print(f"round {i} python_forward: {json.dumps(python_round(args.python_rounds))}", flush=True)


if __name__ == "__main__":
    main()
