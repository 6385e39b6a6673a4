"""A full disk is said in one line, leaves no temporary file, and never passes for something else."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchboost import _io, cli
from torchboost._disk import NoSpaceError, os_error_in
from torchboost.checkpoint import save_checkpoint
from torchboost.cli import export
from torchboost.process.relay import NoiseFilter
from torchboost.observe.spec import ChildCount, StepCounter, read_count

SCRIPTS = Path(__file__).resolve().parent / "scripts"


class _FillsUp:
    """A file that takes ``room`` bytes, then fails as a full disk does."""

    def __init__(self, real, room: int) -> None:
        self._real, self._room = real, room

    def write(self, data) -> int:
        self._room -= len(data)
        if self._room < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._real.write(data)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()


@pytest.fixture
def full_disk(monkeypatch):
    """Every atomic write gets 1000 bytes of room."""
    real_fdopen = os.fdopen
    monkeypatch.setattr(_io.os, "fdopen", lambda fd, mode: _FillsUp(real_fdopen(fd, mode), 1000))


def test_the_boosters_save_on_a_full_disk_says_so_and_keeps_the_old_checkpoint(tmp_path, full_disk):
    old = tmp_path / "ckpt.pt"
    old.write_bytes(b"the previous checkpoint")
    with pytest.raises(NoSpaceError) as caught:
        save_checkpoint(old, {"w": torch.zeros(10_000)})
    assert str(caught.value).startswith("no space left on ") and str(old) in str(caught.value)
    assert old.read_bytes() == b"the previous checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]  # no temporary file left


def test_the_twin_torchs_own_words_without_the_translation(tmp_path, full_disk, monkeypatch):
    monkeypatch.setattr(_io, "NO_SPACE", frozenset())  # the old writer: the error as torch raised it
    with pytest.raises(RuntimeError, match="unexpected pos") as caught:
        save_checkpoint(tmp_path / "ckpt.pt", {"w": torch.zeros(10_000)})
    assert os_error_in(caught.value).errno == errno.ENOSPC  # the cause was there to be read


@pytest.mark.parametrize("code, one_line", [(errno.ENOSPC, True), (errno.EIO, False)])
def test_the_cli_says_a_full_disk_in_one_line(monkeypatch, capsys, tmp_path, code, one_line):
    def run(args):
        raise OSError(code, os.strerror(code), str(tmp_path / "report.json"))

    monkeypatch.setattr(export, "run", run)
    if not one_line:  # the twin: any other failure stays the error it is
        with pytest.raises(OSError):
            cli.main(["export", "--to", "lightning"])
        return
    assert cli.main(["export", "--to", "lightning"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "torchboost export: error: no space left on " in err
    assert str(tmp_path / "report.json") in err and "Traceback" not in err


def test_the_child_tells_its_parent_a_facts_write_failed(tmp_path):
    counter = StepCounter(tmp_path / "steps.count")
    counter.set(7)
    counter.write_failed(errno.ENOSPC)
    assert read_count(tmp_path / "steps.count") == ChildCount(boundaries=7, write_errno=errno.ENOSPC)
    counter.write_failed(0)  # the twin: a later write that worked clears it
    assert read_count(tmp_path / "steps.count") == ChildCount(boundaries=7, write_errno=0)


def test_a_profiler_log_that_cannot_be_written_never_stops_the_relay(tmp_path):
    unwritable = tmp_path / "profiler.log"
    unwritable.mkdir()  # opening it to append fails, as on a full disk
    lines = NoiseFilter(unwritable)
    out = lines.feed("loss 1\nUSDT: [x] profiler_start\nloss 2\n", final=True)
    assert out == "loss 1\nloss 2\n"


def _mount_tmpfs(where: Path) -> bool:
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True)
    return done.returncode == 0


@pytest.mark.slow
def test_doctor_on_a_full_disk_says_so_in_one_line(tmp_path):
    # Its twins are above (a later write that worked clears the child's word; torch's own
    # words without the translation); a doctor run with room to write is every other e2e test.
    small = tmp_path / "small"
    if not _mount_tmpfs(small):
        pytest.skip("mounting a 64 KiB tmpfs needs root")
    out = small / "report"
    try:
        done = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5", "--warmup", "2",
                               "--out", str(out), "--", "python", str(SCRIPTS / "tune_tiny.py"), "--steps", "60"],
                              capture_output=True, text=True, timeout=180)
        leftovers = [p.name for p in out.rglob("*.tmp*")]
    finally:
        subprocess.run(["umount", str(small)], check=False)
    assert leftovers == []
    assert "never called optimizer.step()" not in done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("torchboost")]
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(ours) == 1 and "torchboost doctor: error: no space left on tmpfs" in ours[0]
