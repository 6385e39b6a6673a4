"""A full filesystem under --out, --config or the lock: said before any work, naming that
filesystem and folder, and no empty file left behind (on a real 1 MiB tmpfs, filled up).

Mounting needs root; without it these tests skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost._disk import NoSpaceError
from torchboost.cli._inputs import check_out_dir
from torchboost.cli._lock import LOCK_NAME, folder_lock
from torchboost.config import BoostConfig
from torchboost.tune.config_file import backup_path, write_config

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _fill(folder: Path) -> None:
    with open(folder / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
        except OSError:
            pass


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs at ``tmp_path / "full"`` (unmounted afterwards)."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.slow
def test_a_full_out_folder_is_named_with_its_own_mount_before_any_work(small_tmpfs):
    out = small_tmpfs / "tb"
    out.mkdir()
    _fill(small_tmpfs)
    with pytest.raises(NoSpaceError) as caught:
        check_out_dir(out)
    assert str(caught.value).startswith(f"no space left on tmpfs (mounted at {small_tmpfs}, ")
    assert f"to write {out};" in str(caught.value)
    assert list(out.iterdir()) == []  # the probe file is gone


@pytest.mark.slow
def test_twin_a_roomy_out_folder_passes_and_keeps_nothing(small_tmpfs):
    out = small_tmpfs / "tb"
    assert check_out_dir(out) == out and sorted(p.name for p in out.iterdir()) == [".gitignore", ".torchboost"]


@pytest.mark.slow
def test_tune_on_a_full_out_says_so_in_one_line_and_leaves_no_lock(small_tmpfs, tmp_path):
    out = small_tmpfs / "tb"
    out.mkdir()
    _fill(small_tmpfs)
    done = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--budget", "20", "--out", str(out),
                           "--", sys.executable, str(SCRIPTS / "tune_tiny.py")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"no space left on tmpfs (mounted at {small_tmpfs}" in done.stderr
    assert "mounted at /," not in done.stderr and str(tmp_path) + ";" not in done.stderr
    assert list(out.iterdir()) == []


@pytest.mark.slow
def test_the_lock_on_a_full_folder_leaves_no_empty_file(small_tmpfs):
    _fill(small_tmpfs)
    with pytest.raises(NoSpaceError):
        with folder_lock(small_tmpfs):
            pass
    assert not (small_tmpfs / LOCK_NAME).exists()


@pytest.mark.slow
def test_twin_a_lock_that_could_be_written_stays_with_its_process_id(small_tmpfs):
    with folder_lock(small_tmpfs):
        assert (small_tmpfs / LOCK_NAME).read_text() == str(os.getpid())


@pytest.mark.slow
def test_a_full_disk_under_the_users_toml_leaves_no_empty_bak(small_tmpfs):
    toml = small_tmpfs / "torchboost.toml"
    toml.write_text("# my own settings\n[loader]\nnum_workers = 2\n" + "# padding\n" * 2000)
    _fill(small_tmpfs)
    before = toml.read_bytes()
    with pytest.raises(NoSpaceError):
        write_config(toml, BoostConfig.off(), header="# Tuned by torchboost for: python train.py")
    assert toml.read_bytes() == before and not backup_path(toml).exists()
    assert sorted(p.name for p in small_tmpfs.iterdir()) == ["filler", "torchboost.toml"]
