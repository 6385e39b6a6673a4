"""Two tunes in one report folder: the second says so in one line and exits 2, before any work."""

from __future__ import annotations

import subprocess
import sys

import pytest

from torchboost import out_folder
from torchboost.cli._lock import folder_lock
from torchboost.process.launch import UsageError


def test_a_held_folder_refuses_a_second_holder_until_released(tmp_path):
    with folder_lock(tmp_path):
        with pytest.raises(UsageError, match=r"another torchboost tune is running in this folder \(process \d+\)"):
            with folder_lock(tmp_path):
                pass
    with folder_lock(tmp_path):  # the twin: released, it is taken again
        pass


@pytest.mark.slow
def test_a_second_tune_in_the_same_folder_says_so_and_runs_nothing(tmp_path):
    (tmp_path / "train.py").write_text("raise SystemExit('the script must not run')\n")
    out = out_folder.claim(tmp_path / "out")  # as the first tune made it
    argv = [sys.executable, "-m", "torchboost.cli", "tune", "--budget", "60", "--out", str(out), "--", "python",
            "train.py"]
    with folder_lock(out):  # a first tune holds the folder
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "another torchboost tune is running" in done.stderr
    assert "must not run" not in done.stderr  # the twin, a freed folder taken again, is above
