"""``torchboost doctor`` on a script that prints every step and saves a checkpoint every 5 steps."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "print_and_save.py"


@pytest.mark.slow
def test_the_checkpoint_and_printing_rows_add_up_with_the_rest_to_the_step(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "20", "--warmup", "2",
                           "--out", str(out), "--json", "--", sys.executable, str(SCRIPT), "--steps", "400"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    rows, facts = report["phase_ms"], report["facts"]
    assert rows["checkpoint"] > 0 and rows["output"] > 0
    host = facts["host"]
    assert len(set(b for b in host["checkpoint_bytes"])) == 1 and host["checkpoint_bytes"][0] > 1_000_000
    steps = sorted(set(host["checkpoint_steps"]))
    assert {b - a for a, b in zip(steps, steps[1:])} == {5}  # every 5 steps
    assert host["output_calls"] == 20  # one print in each recorded step
    # The step, its checkpoints spread over it: the median step without its own host calls,
    # and the measured steps' checkpoint time per step.
    measured = [s for s in facts["steps"] if s["index"] >= facts["warmup_steps"]]
    step_ms = (statistics.median(s["total_ms"] - s["checkpoint_ms"] - s["output_ms"] for s in measured)
               + statistics.mean(s["checkpoint_ms"] + s["output_ms"] for s in measured))
    assert sum(rows.values()) == pytest.approx(step_ms, rel=0.10)
    assert not (tmp_path / "ckpt" / "model.pt").exists()  # the script's checkpoint kept out of the user's folder
