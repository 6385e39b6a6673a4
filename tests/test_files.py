"""Files torchboost writes and reads: atomic writes keep modes, broken checkpoints say so."""

from __future__ import annotations

import os
import time

import pytest
import torch

from torchboost._io import atomic_write_bytes
from torchboost.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


def test_an_atomic_write_keeps_the_files_mode(tmp_path):
    path = tmp_path / "torchboost.toml"
    path.write_text("old\n")
    path.chmod(0o644)
    atomic_write_bytes(path, b"new\n")
    assert path.read_bytes() == b"new\n" and (path.stat().st_mode & 0o777) == 0o644
    path.chmod(0o600)
    atomic_write_bytes(path, b"newer\n")
    assert (path.stat().st_mode & 0o777) == 0o600


def test_a_new_file_gets_the_umasks_mode(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "new.json", b"{}")
    finally:
        os.umask(old)
    assert ((tmp_path / "new.json").stat().st_mode & 0o777) == 0o644  # not mkstemp's 0600


def test_a_killed_writers_temp_file_is_removed_by_the_next_write(tmp_path):
    stale = tmp_path / ".ckpt.pt.abc123.tmp"
    stale.write_bytes(b"x" * 4096)  # what a kill mid-save leaves
    old = time.time() - 3600
    os.utime(stale, (old, old))
    fresh = tmp_path / ".ckpt.pt.def456.tmp"  # another writer's, still at work
    fresh.write_bytes(b"y")
    atomic_write_bytes(tmp_path / "ckpt.pt", b"data")
    assert not stale.exists() and fresh.exists()


def _broken(tmp_path, kind: str):
    path = tmp_path / f"{kind}.pt"
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        save_checkpoint(path, {"model": {"w": torch.arange(1000.0)}})
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "garbage":
        path.write_bytes(os.urandom(4096))
    else:
        path.write_text("hello, not a checkpoint\n")
    return path


@pytest.mark.parametrize("kind, message", [("empty", "empty file"), ("truncated", "truncated or corrupt"),
                                           ("garbage", "truncated or corrupt"), ("text", "truncated or corrupt")])
def test_every_broken_checkpoint_is_a_checkpoint_error_naming_the_file(tmp_path, kind, message):
    path = _broken(tmp_path, kind)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def test_a_good_checkpoint_still_loads(tmp_path):
    """The twin of the broken ones: the same file, whole, loads."""
    save_checkpoint(tmp_path / "good.pt", {"model": {"w": torch.arange(4.0)}})
    assert torch.equal(load_checkpoint(tmp_path / "good.pt")["model"]["w"], torch.arange(4.0))
