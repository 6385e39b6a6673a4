"""SIGTERM or SIGHUP to `torchboost run`: the script's finally runs, its workers end with it,
"stopped by" and 128 + N, as under the doctor."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from torchboost import BoostConfig

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run_stoppable.py"

pytestmark = pytest.mark.slow


def _stopped(tmp_path: Path, command: list[str], signum: int) -> tuple[int, str, list[int]]:
    """Start ``command``, send ``signum`` once the script steps; its status, stderr, worker pids."""
    proc = subprocess.Popen([*command, str(SCRIPT), str(tmp_path)], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "stepping":
                break
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    workers = [int(p.name.split("-")[1]) for p in tmp_path.glob("worker-*")]
    return proc.returncode, err, workers


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_runs_the_scripts_finally_and_ends_its_persistent_workers(tmp_path, signum):
    config = BoostConfig.off().replace(loader={"num_workers": 2, "persistent_workers": True})
    config.to_toml(tmp_path / "torchboost.toml")
    command = [sys.executable, "-m", "torchboost.cli", "run", "--", "python"]
    status, err, workers = _stopped(tmp_path, command, signum)
    name = signal.Signals(signum).name
    assert status == 128 + signum, err
    assert f"torchboost run: stopped by {name}; the script and its processes were ended" in err
    assert (tmp_path / "finally").read_text() == "ran"
    assert len(workers) == 2 and not [pid for pid in workers if _alive(pid)]
    assert "Traceback" not in err


def test_the_twin_plain_python_skips_the_finally(tmp_path):
    # What the checks above catch: python's default SIGTERM ends it with no finally.
    status, _, _ = _stopped(tmp_path, [sys.executable], signal.SIGTERM)
    assert status == -signal.SIGTERM and not (tmp_path / "finally").exists()
