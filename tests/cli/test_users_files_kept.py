"""No file of the user's lost, wherever the script writes or ``--out`` points.

Each case hashes every file of the user's before and after a doctor run of a script that
writes there: the script's own output folder given as ``--out``; a checkpoint saved to an
absolute path under the temp directory; SQLite databases, inside the folder and outside
it. Each has a twin with the guard turned off for that case (the doctor run in this
process, the one switch patched), which must lose the file the same way.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from torchboost import out_folder

SCRIPT = """\
import os, sqlite3, sys, torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 8), torch.randn(32, 1)
databases = [sqlite3.connect(p) for p in sys.argv[2:]]
for step in range(300):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 5 == 0:
        os.makedirs("results", exist_ok=True)
        torch.save({"step": step}, "results/ckpt.pt")
        torch.save({"step": step}, sys.argv[1])
        with open("results/metrics.csv", "a") as fh:
            fh.write(f"{step},{loss.item():.4f}\\n")
        for db in databases:
            db.execute("insert into metrics values (?, ?)", (step, loss.item()))
            db.commit()
"""


def _hashes(*folders: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for folder in folders
            for p in sorted(folder.rglob("*")) if p.is_file() and "torchboost-doctor" not in p.parts}


def _database(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("create table metrics (step int, loss real)")
        db.execute("insert into metrics values (200, 0.5)")
    db.close()
    return path


@pytest.fixture
def project(tmp_path):
    """The user's project (its own output folder holds a step-200 checkpoint, a CSV, a report
    and a kept note) and, outside it, a folder under the temp directory with a checkpoint
    and a tracker's database."""
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    (proj / "results" / "writes").mkdir(parents=True)
    elsewhere.mkdir()
    assert str(elsewhere.resolve()).startswith(str(Path(tempfile.gettempdir()).resolve()))
    (proj / "train.py").write_text(SCRIPT)
    torch.save({"step": 200}, proj / "results" / "ckpt.pt")
    (proj / "results" / "metrics.csv").write_text("200,0.5000\n")
    (proj / "results" / "report.json").write_text('{"mine": true}\n')
    (proj / "results" / "writes" / "important.txt").write_text("the user's note\n")
    torch.save({"step": 200}, elsewhere / "ckpt.pt")
    _database(elsewhere / "tracker.db")
    _database(proj / "tracker.db")
    return proj, elsewhere


def _command(proj: Path, elsewhere: Path) -> list[str]:
    return ["python", "train.py", str(elsewhere / "ckpt.pt"), str(elsewhere / "tracker.db"), "tracker.db"]


def _doctor(proj: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5", "--warmup", "1", *argv],
                          cwd=proj, capture_output=True, text=True, timeout=300)


def _in_process_doctor(proj: Path, monkeypatch, *argv: str) -> int:
    from torchboost.cli import main

    monkeypatch.chdir(proj)
    return main(["doctor", "--steps", "5", "--warmup", "1", *argv])


@pytest.mark.slow
def test_out_on_the_scripts_own_output_folder_is_refused_in_one_line_and_nothing_changes(project):
    proj, elsewhere = project
    before = _hashes(proj, elsewhere)
    for out in ("results", "."):
        done = _doctor(proj, "--out", out, "--", *_command(proj, elsewhere))
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().count("\n") == 0 and f"--out {out}: holds files torchboost did not write" in done.stderr
    assert _hashes(proj, elsewhere) == before and not (proj / "torchboost-doctor").exists()


@pytest.mark.slow
def test_twin_out_on_the_output_folder_taken_as_torchboosts_loses_the_users_note(project, monkeypatch):
    proj, elsewhere = project
    monkeypatch.setattr(out_folder, "check", lambda folder, flag="--out": Path(folder))  # the refusal off
    assert _in_process_doctor(proj, monkeypatch, "--json", "--out", "results", "--", *_command(proj, elsewhere)) == 0
    assert not (proj / "results" / "writes" / "important.txt").exists()  # removed as an earlier run's writes
    assert (proj / "results" / "report.json").read_text() != '{"mine": true}\n'


@pytest.mark.slow
def test_a_doctor_run_leaves_the_temp_directory_and_databases_as_they_were(project):
    proj, elsewhere = project
    before = _hashes(proj, elsewhere)
    done = _doctor(proj, "--", *_command(proj, elsewhere))
    assert done.returncode == 0, done.stderr[-2000:]
    assert _hashes(proj, elsewhere) == before  # the checkpoint under the temp directory, both databases
    with sqlite3.connect(elsewhere / "tracker.db") as db:
        assert db.execute("select count(*) from metrics").fetchone() == (1,)
    assert "tracker.db" in done.stderr and "your folders are as they were, and so is every file the run's Python changed elsewhere" in done.stderr
    assert "by you" not in done.stderr
    kept = proj / "torchboost-doctor" / "writes" / "outside"
    assert torch.load(next(kept.rglob("ckpt.pt")))["step"] >= 5  # the script's own checkpoint, kept apart


@pytest.mark.slow
def test_twin_the_temp_directory_exempt_loses_the_checkpoint_saved_there(project, monkeypatch):
    from torchboost.process.guard import run_guard

    proj, elsewhere = project
    monkeypatch.setattr(run_guard, "own_output_files", lambda: (tempfile.gettempdir(),))  # as it was: exempt
    before = _hashes(elsewhere)
    assert _in_process_doctor(proj, monkeypatch, "--json", "--", *_command(proj, elsewhere)) == 0
    after = _hashes(elsewhere)
    assert after[str(elsewhere / "ckpt.pt")] != before[str(elsewhere / "ckpt.pt")]
    assert torch.load(elsewhere / "ckpt.pt")["step"] < 200


def test_a_database_written_through_sqlite_is_put_back_and_its_twin_is_named(tmp_path, monkeypatch):
    """In this process, a database outside the user's folders (and outside the temp
    directory, moved aside for the test): a guarded connection's writes are undone; with
    the sqlite wrapper taken out of the guard (the twin) the same writes stay, and are
    named as changed outside torchboost's sight, never said to be the user's doing."""
    from torchboost.process.guard import writers
    from torchboost.process.guard.run_guard import RunGuard
    from torchboost.process.guard.write_guard import WriteGuard
    from torchboost.process.guard.guard_spec import WriteGuardSpec

    (tmp_path / "systemp").mkdir()
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path / "systemp"))
    results = {}
    for twin in (False, True):
        home = tmp_path / f"run{int(twin)}"
        (home / "proj").mkdir(parents=True)
        db_path = _database(home / "tracker.db")
        before = hashlib.sha256(db_path.read_bytes()).hexdigest()
        guard = RunGuard(home / "proj" / "out", home / "proj" / "train.py")
        spec = WriteGuardSpec.from_dict(guard.spec())
        base = writers.base
        if twin:
            writers.base = lambda guard: [t for t in base(guard) if t[1] != "connect"]
        try:
            with WriteGuard(spec):
                db = sqlite3.connect(db_path)
                db.execute("insert into metrics values (1, 1.0)")
                db.commit()
        finally:
            writers.base = base
        writes = guard.settle()
        db.close()
        results[twin] = (hashlib.sha256(db_path.read_bytes()).hexdigest() == before, writes)
    kept, writes = results[False]
    assert kept and "your folders are as they were, and so is every file the run's Python changed elsewhere" in writes.words()
    lost, twin_writes = results[True]
    assert not lost and f"changed outside torchboost's sight: {tmp_path / 'run1' / 'tracker.db'}" in twin_writes.words()


@pytest.mark.slow
def test_git_status_after_doctor_and_tune_shows_nothing_untracked(tmp_path):
    """A fresh repository: after doctor and tune, git sees nothing new but what tune names
    (its torchboost.toml, when it writes one); each report folder ignores itself. Twin: a
    report folder without its .gitignore is listed."""
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    (tmp_path / "train.py").write_text(SCRIPT.replace("sys.argv[1]", "'ckpt.pt'").replace("sys.argv[2:]", "[]"))
    for argv in (["init", "-q"], ["add", "train.py"], ["commit", "-qm", "x"]):
        subprocess.run(git + argv, cwd=tmp_path, check=True)
    done = _doctor(tmp_path, "--", "python", "train.py")
    assert done.returncode == 0, done.stderr[-2000:]
    tuned = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--budget", "15", "--verify-pairs", "0",
                            "--", "python", "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert tuned.returncode in (0, 3, 4), tuned.stderr[-2000:]
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert [line for line in status if line not in ("?? torchboost.toml", "?? torchboost.unverified.toml")] == []
    assert not (tmp_path / "torchboost-tune" / ".torchboost-tune.lock").exists()  # the lock went with the tune
    (tmp_path / "torchboost-doctor" / ".gitignore").unlink()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert "?? torchboost-doctor/" in status


PREP = """\
import sys
open(sys.argv[1], "w").write('{"prep": "the run"}')
open("index.json", "w").write('{"prep": "the run"}')
"""


@pytest.mark.slow
@pytest.mark.parametrize("isolated", [False, True])
def test_a_wrappers_python_that_never_imports_torch_is_guarded_from_its_first_line(tmp_path, isolated):
    """``bash train.sh`` runs ``python prep.py`` (no torch: it writes a config outside the
    folder and an index inside it), then the training script. Both files are as they were.
    Twin: ``python -I prep.py``, which loads no start-up hook, changes the one outside."""
    proj, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    proj.mkdir()
    elsewhere.mkdir()
    (proj / "prep.py").write_text(PREP)
    (proj / "train.py").write_text(SCRIPT.replace("sys.argv[2:]", "[]"))
    (proj / "train.sh").write_text(f"python {'-I ' if isolated else ''}prep.py {elsewhere / 'cfg.json'}\n"
                                   f"python train.py {elsewhere / 'ckpt.pt'}\n")
    (elsewhere / "cfg.json").write_text('{"the user": 1}')
    (proj / "index.json").write_text('{"the user": 1}')
    torch.save({"step": 200}, elsewhere / "ckpt.pt")
    before = _hashes(proj, elsewhere)
    done = _doctor(proj, "--", "bash", "train.sh")
    assert done.returncode == 0, done.stderr[-2000:]
    after = _hashes(proj, elsewhere)
    assert (after == before) is not isolated
    if isolated:  # inside the folder the snapshot still sees what it could not keep, and names it
        assert "changed outside torchboost's sight: index.json" in done.stderr
