"""The end-to-end check's tuned side (``torchboost run`` running the script in its own
process) writes under the check's write guard, as the baseline side does: a checkpoint
too large to be copied before the run is kept apart, never overwritten."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost.config import BoostConfig
from torchboost.plan import Plan
from torchboost.process.guard.run_guard import INSURED_FILE_BYTES
from torchboost.tune.verify.check import _config_files, _whole_run

SCRIPT = """\
import torch
weights = torch.randn(600_000)  # 2.4 MB saved: over the size of the files copied before a run
for step in range(3):
    torch.save({"w": weights, "step": step}, "ckpt.pt")
    with open("train.log", "a") as fh:
        fh.write(f"step {step}\\n")
"""


def _folder(tmp_path: Path) -> Path:
    user = tmp_path / "user"
    user.mkdir()
    (user / "train.py").write_text(SCRIPT)
    subprocess.run([sys.executable, "-c", "import torch; torch.save({'w': torch.zeros(600_000), 'step': -1}, "
                    "'ckpt.pt')"], cwd=user, check=True)
    (user / "train.log").write_text("the user's own log\n")
    assert (user / "ckpt.pt").stat().st_size > INSURED_FILE_BYTES
    return user


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}


@pytest.mark.slow
def test_both_sides_of_the_end_to_end_check_leave_a_large_checkpoint_as_it_was(tmp_path, monkeypatch):
    user = _folder(tmp_path)
    before = _hashes(user)
    monkeypatch.chdir(user)
    files = _config_files(tmp_path / "configs", {name: Plan.of(BoostConfig()) for name in ("baseline", "tuned")})
    ledger = tmp_path / "writes.jsonl"
    for config in (None, files["tuned"]):
        assert _whole_run(["python", "train.py"], config, 120, tmp_path / "whole", ledger) is not None
    assert _hashes(user) == before
    sides = [json.loads(line) for line in ledger.read_text().splitlines()]
    for side in sides:  # the script's Python writes were seen on both sides, and kept apart
        assert {w["path"]: w["times"] for w in side["kept_apart"]} == {"ckpt.pt": 3, "train.log": 3}, side
        assert side["not_restored"] == []


@pytest.mark.slow
def test_twin_the_users_own_torchboost_run_writes_its_checkpoint(tmp_path, monkeypatch):
    """The user's own run has no guard: the script's checkpoint is written, so the check
    above can fail."""
    user = _folder(tmp_path)
    before = _hashes(user)
    files = _config_files(tmp_path / "configs", {name: Plan.of(BoostConfig()) for name in ("baseline", "tuned")})
    done = subprocess.run([sys.executable, "-m", "torchboost.cli", "run", "--config", str(files["tuned"]), "--",
                           "python", "train.py"], cwd=user, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    after = _hashes(user)
    assert after["ckpt.pt"] != before["ckpt.pt"] and after["train.log"] != before["train.log"]
