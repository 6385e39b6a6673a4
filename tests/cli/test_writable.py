"""tune checks that it can write its torchboost.toml before any work, not after the search."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torchboost.cli._inputs import check_writable_file
from torchboost.process.launch import UsageError

UNWRITABLE = Path("/sys/torchboost.toml")  # sysfs: not even root creates a file there


@pytest.mark.slow
def test_a_file_it_cannot_write_is_refused_before_any_work(tmp_path):
    if not Path("/sys").is_dir():
        pytest.skip("needs Linux's /sys")
    (tmp_path / "train.py").write_text("raise SystemExit('the script must not run')\n")
    done = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--out", str(tmp_path / "out"),
                           "--config", str(UNWRITABLE), "--", "python", "train.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "cannot be written" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "must not run" not in done.stderr


def test_the_twin_a_writable_file_passes_untouched(tmp_path):
    own = tmp_path / "torchboost.toml"
    own.write_text("# mine\n[cpu]\nthreads = 1\n")
    before = own.stat().st_mtime_ns
    assert check_writable_file(own) == own
    assert own.read_text() == "# mine\n[cpu]\nthreads = 1\n" and own.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["torchboost.toml"]  # no probe file left
    assert check_writable_file(tmp_path / "new.toml") == tmp_path / "new.toml" and not (tmp_path / "new.toml").exists()
    if Path("/sys").is_dir():
        with pytest.raises(UsageError, match="cannot be written"):
            check_writable_file(UNWRITABLE)
