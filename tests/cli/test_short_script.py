"""doctor and tune on a 3-step script say the same: 3 steps, all within the warm-up."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range({steps}):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.slow
@pytest.mark.parametrize("steps", [3, 0])  # twin: a script that never steps
def test_doctor_and_tune_agree_on_a_short_script(tmp_path, steps):
    (tmp_path / "short.py").write_text(SCRIPT.format(steps=steps))
    said = {}
    for command in ("doctor", "tune"):
        argv = [sys.executable, "-m", "torchboost.cli", command, "--out", str(tmp_path / command), "--",
                "python", "short.py"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        said[command] = proc.stdout + proc.stderr
    words = "the script ended after 3 training steps, all within the 5 warm-up steps"
    assert (words in said["doctor"]) is (steps == 3), said["doctor"][-2000:]
    assert (words in said["tune"]) is (steps == 3), said["tune"][-2000:]
    assert "no training step completed (exit code 0)" not in said["tune"] or steps == 0
