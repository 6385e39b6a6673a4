"""``torchboost doctor`` on the loops people write: an evaluation pass every few steps,
accumulation by hand. Each case has its twin; each child imports torch (seconds)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "step_shapes.py"


def _doctor(tmp_path: Path, *args: str) -> tuple[str, dict, dict]:
    out = tmp_path / "report"
    argv = [sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5", "--warmup", "2", "--out", str(out),
            "--", "python", str(SCRIPT), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout, json.loads((out / "facts.json").read_text()), json.loads((out / "report.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--eval-grad"], ["--eval-grad", "--train-mode"]])
def test_an_evaluation_pass_is_outside_the_training_step(tmp_path, flags):
    # 200 training batches, 30 evaluation batches after every 3rd step: under no_grad, or in
    # eval mode with gradients on (its calls then counted as building a graph for nothing).
    stdout, facts, report = _doctor(tmp_path, "--batches", "200", "--eval-every", "3", *flags)
    # The training loader is the one whose batches reach backward, whichever gave more.
    assert facts["planned_steps"] == 200
    notes = " ".join(report["notes"])  # the terminal's notes, as written
    assert "the script would have run 200 (one epoch of the script's DataLoader)" in notes
    if "--train-mode" in flags:  # twin: gradients on, train mode: the pass is inside a step's forward
        assert report["evaluation"]["passes"] == 0 and "Evaluation (" not in notes
        return
    assert report["evaluation"]["passes"] >= 1 and report["evaluation"]["ms"] > 0
    assert any(step["eval_ms"] > 0 for step in facts["steps"])
    assert "(the model called with gradients off, or in eval mode, until training resumed)" in notes
    assert "Evaluation" in stdout
    assert (facts["evaluation"]["grad_calls"] > 0) is ("--eval-grad" in flags)


@pytest.mark.slow
@pytest.mark.parametrize("accum, planned", [(4, 128), (1, 512)])  # twin: no accumulation
def test_the_planned_run_counts_optimizer_steps(tmp_path, accum, planned):
    _, facts, report = _doctor(tmp_path, "--accum", str(accum))
    assert facts["micro_steps_per_step"] == accum
    assert facts["planned_steps"] == planned
    assert f"the script would have run {planned} (one epoch of the script's DataLoader" in " ".join(report["notes"])
