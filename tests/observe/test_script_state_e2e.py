"""The doctor leaves what the script holds as it was: its locals() dict, its loop's turns."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _doctor(tmp_path: Path, script: str) -> tuple[subprocess.CompletedProcess, dict]:
    argv = [sys.executable, "-m", "torchboost.cli", "doctor", "--json", "--steps", "5", "--warmup", "2",
            "--", "python", str(SCRIPTS / script)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(proc.stdout)


@pytest.mark.slow
def test_a_script_logging_its_locals_logs_the_same_dict_under_the_doctor(tmp_path):
    plain = subprocess.run([sys.executable, str(SCRIPTS / "logs_its_locals.py")], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    proc, report = _doctor(tmp_path, "logs_its_locals.py")
    logged = [line for line in proc.stderr.splitlines() if " hparams " in line]
    assert logged and all(line in plain.stdout.splitlines() for line in logged), logged
    assert report["facts"]["observer_errors"] == []


@pytest.mark.slow
def test_a_one_epoch_onecycle_script_is_not_turned_past_its_end(tmp_path):
    proc, report = _doctor(tmp_path, "onecycle_epoch.py")
    assert "turns 16" in proc.stderr  # its own 16 batches, no re-served one: no 17th scheduler step
    facts = report["facts"]
    assert facts["planned_steps"] == 16 and facts["replay_step_ms"] == []
