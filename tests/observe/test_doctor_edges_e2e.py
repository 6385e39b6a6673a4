"""``torchboost doctor`` on scripts that do unusual things: each child imports torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _doctor(tmp_path: Path, *command: str, timeout: float = 180, **kwargs) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "report"
    argv = [sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5", "--warmup", "2",
            "--out", str(out), "--", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs), out


@pytest.mark.slow
def test_a_150_kb_line_on_stderr_does_not_hang_the_doctor(tmp_path):
    # Before the bounded relay this run took minutes (a 150 KB line: 219 s) and ignored
    # SIGINT and SIGTERM; the timeout is the failure signal, generous for a busy machine.
    proc, out = _doctor(tmp_path, "python", str(SCRIPTS / "long_stderr_line.py"), "150", timeout=150)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "config=" + "x" * 150_000 + "\n" in proc.stderr  # passed on whole
    assert json.loads((out / "report.json").read_text())["steps_observed"] == 5
