"""Kill a training run right after a window-end checkpoint, resume it: the same losses, bit for bit."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).parent / "scripts" / "resume_train.py"


def _run(folder: Path, *args: str) -> int:
    cmd = [sys.executable, str(SCRIPT), "--ckpt", str(folder / "run.pt"), "--log", str(folder / "run.log"), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120).returncode


def _losses(folder: Path) -> list[str]:
    return (folder / "run.log").read_text().split("\n")[:-1]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("full")
    assert _run(folder) == 0
    losses = _losses(folder)
    assert len(losses) == 22  # 2 epochs of 11 micro-batches
    return losses


def _killed(folder: Path, after_step: int) -> Path:
    assert _run(folder, "--kill-after-step", str(after_step)) == -signal.SIGKILL
    return folder


@pytest.fixture(scope="module")
def killed_mid_second_epoch(tmp_path_factory) -> Path:
    return _killed(tmp_path_factory.mktemp("killed"), 9)  # step 9: epoch 1, 6 of 11 batches


def _resumed_copy(source: Path, folder: Path) -> Path:
    for name in ("run.pt", "run.log"):
        shutil.copy(source / name, folder / name)
    return folder


@pytest.mark.slow
def test_kill_mid_epoch_and_resume_gives_the_same_losses_bitwise(tmp_path, uninterrupted, killed_mid_second_epoch):
    folder = _resumed_copy(killed_mid_second_epoch, tmp_path)
    assert 11 < len(_losses(folder)) < 22
    assert _run(folder, "--resume") == 0
    assert _losses(folder) == uninterrupted


@pytest.mark.slow
def test_kill_at_the_end_of_an_epoch_and_resume(tmp_path, uninterrupted):
    folder = _killed(tmp_path, 6)  # the shorter last window of epoch 0
    assert len(_losses(folder)) == 11
    assert _run(folder, "--resume") == 0
    assert _losses(folder) == uninterrupted


@pytest.mark.slow
@pytest.mark.parametrize("drop", ["position", "rng"])
def test_resume_without_the_position_or_rng_would_diverge(tmp_path, uninterrupted, killed_mid_second_epoch, drop):
    """Broken twins: weights, optimizer and scheduler restored, but not where the loader was
    (or the random state at the checkpoint): the same comparison must fail."""
    folder = _resumed_copy(killed_mid_second_epoch, tmp_path)
    state = torch.load(folder / "run.pt", weights_only=True)
    if drop == "position":
        del state["loader"]
    else:
        state["loader"]["rng"] = state["loader"]["epoch_rng"]
    torch.save(state, folder / "run.pt")
    assert _run(folder, "--resume") == 0
    assert _losses(folder) != uninterrupted
