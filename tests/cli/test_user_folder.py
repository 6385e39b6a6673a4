"""The user's folder left as it was: a checkpointing and logging script through doctor and tune.

The folder holds the user's own checkpoint (step 200), their metrics CSV and an older run's
log; the script saves ``ckpt.pt`` every 10 steps, appends to ``runs/metrics.csv`` and logs
into a new ``runs/<time>/``. After doctor and after tune every pre-existing file's hash is
unchanged, no new entry is left in the folder, and the writes are listed. The twin is the
same script under ``doctor --full``, the user's real run, which has no protection: its
writes stay, so the same check must fail there.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = """\
import os, time, torch
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 16), torch.randn(64, 1)
run = os.path.join("runs", str(time.time_ns()))
os.makedirs(run, exist_ok=True)
for step in range(60):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        torch.save({"step": step, "model": model.state_dict()}, "ckpt.pt")
        with open("runs/metrics.csv", "a") as fh:
            fh.write(f"{step},{loss.item():.4f}\\n")
        with open(os.path.join(run, "log.txt"), "a") as fh:
            fh.write(f"step {step}\\n")
"""

OURS = {"torchboost-doctor", "torchboost-tune", "torchboost.toml", "torchboost.toml.bak"}


def _folder(tmp_path: Path) -> Path:
    import torch

    (tmp_path / "train.py").write_text(SCRIPT)
    torch.save({"step": 200}, tmp_path / "ckpt.pt")
    (tmp_path / "runs" / "old").mkdir(parents=True)
    (tmp_path / "runs" / "metrics.csv").write_text("0,1.0000\n")
    (tmp_path / "runs" / "old" / "log.txt").write_text("the user's own run\n")
    return tmp_path


def _state(folder: Path) -> dict[str, str]:
    """Every entry of the user's folder (torchboost's own outputs left out) and each file's hash."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*")) if p.relative_to(folder).parts[0] not in OURS}


def _torchboost(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    exe = shutil.which("torchboost") or pytest.skip("the torchboost console script is not installed")
    return subprocess.run([exe, *argv], capture_output=True, text=True, cwd=folder, timeout=600)


@pytest.mark.slow
def test_doctor_leaves_the_users_folder_as_it_was_and_lists_the_writes(tmp_path):
    folder = _folder(tmp_path)
    before = _state(folder)
    proc = _torchboost(folder, "doctor", "--steps", "30", "--warmup", "2", "--json", "--", "python", "train.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _state(folder) == before  # every file's hash, and no new entry
    writes = json.loads(proc.stdout)["writes"]
    listed = {w["path"]: w for w in writes["kept_apart"]}
    assert listed["ckpt.pt"]["times"] >= 3 and listed["runs/metrics.csv"]["times"] >= 3
    assert any(p.startswith("runs/") and w["new"] for p, w in listed.items())  # the new runs/<time>/
    assert "your folders are as they were, and so is every file the run's Python changed elsewhere" in writes["line"] and "kept apart in" in proc.stderr
    kept = folder / "torchboost-doctor" / "writes"
    assert __import__("torch").load(kept / "ckpt.pt")["step"] >= 20  # the script's own checkpoint, kept apart


@pytest.mark.slow
def test_twin_the_users_real_run_full_has_no_protection_and_the_check_fails(tmp_path):
    folder = _folder(tmp_path)
    before = _state(folder)
    proc = _torchboost(folder, "doctor", "--full", "--steps", "5", "--warmup", "2", "--json", "--",
                       "python", "train.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = _state(folder)
    assert after != before  # the check above can fail: here the checkpoint and the CSV changed
    assert after["ckpt.pt"] != before["ckpt.pt"] and len(after) > len(before)
    assert "stays where it wrote it" in json.loads(proc.stdout)["writes"]["line"]


@pytest.mark.slow
def test_tune_leaves_the_users_folder_as_it_was(tmp_path):
    folder = _folder(tmp_path)
    before = _state(folder)
    proc = _torchboost(folder, "tune", "--budget", "20", "--", "python", "train.py")
    # a change written, no proven win, or (a loaded machine, --budget 20) a pick written apart
    assert proc.returncode in (0, 3, 4), proc.stderr[-2000:]
    assert _state(folder) == before  # trials and end-to-end runs alike
    writes = json.loads((folder / "torchboost-tune" / "report.json").read_text())["writes"]
    listed = {p["path"]: p for p in writes["paths"]}
    # every run but one ended before its first step's save (on a loaded machine a capped run can)
    assert writes["runs"] - 1 <= listed["ckpt.pt"]["runs"] <= writes["runs"] and writes["runs"] >= 2
    assert "runs/…" in listed
    assert writes["line"].endswith("your folders are as they were, and so is every file the run's Python changed elsewhere")


def _doctor_into(folder: Path, log: Path) -> dict:
    """``torchboost doctor -- python train.py >> log 2>&1``, as a user keeps its words: its report's writes."""
    exe = shutil.which("torchboost") or pytest.skip("the torchboost console script is not installed")
    with open(log, "a") as fh:
        proc = subprocess.run([exe, "doctor", "--steps", "5", "--warmup", "2", "--out", str(folder / "doc"), "--",
                               "python", "train.py"], stdout=fh, stderr=subprocess.STDOUT, cwd=folder, timeout=600)
    assert proc.returncode == 0, log.read_text()[-2000:]
    return json.loads((folder / "doc" / "report.json").read_text())["writes"]


@pytest.mark.slow
def test_the_file_the_user_sends_the_doctors_words_to_is_theirs_not_a_write_to_name(tmp_path):
    """``>> log.txt 2>&1`` in the script's folder: torchboost writes it (its words and the
    script's, relayed while it runs), the user asked for it; it is neither kept apart nor
    named as a file changed behind the run's back. Twin: a log the doctor does not write
    to, appended to by another writer meanwhile, is named."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text(SCRIPT.replace('if step % 10 == 0:', 'print("step", step, flush=True)\n    if False:'))
    log = folder / "log.txt"
    log.write_text("an earlier run's words\n")
    writes = _doctor_into(folder, log)
    words = log.read_text()
    assert words.startswith("an earlier run's words\nstep 0") and "step 6" in words  # kept, and relayed
    assert "log.txt" not in json.dumps(writes) and "log.txt" not in words, writes


@pytest.mark.slow
def test_twin_a_log_another_writer_appends_to_meanwhile_is_named(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "train.py").write_text(SCRIPT.replace('if step % 10 == 0:', 'print("step", step, flush=True)\n    if step == 3:\n        os.system("echo more >> other.log")\n    if False:'))
    (folder / "other.log").write_text("an earlier run's words\n")
    writes = _doctor_into(folder, tmp_path / "log.txt")
    assert "other.log" in json.dumps(writes), writes
