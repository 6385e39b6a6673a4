"""Never hang, never orphan: stalls, signals and kills, each ending with a clear word.

Each test asserts the exit status, the message, and that no process of the run is left
(looked up with psutil by the script path in its command line).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture
def hang(tmp_path) -> str:
    """hang.py copied into this test's folder: its path names this test's processes alone
    (two tests of hang.py on two workers at once each saw the other's as left behind)."""
    path = tmp_path / "hang.py"
    shutil.copyfile(SCRIPTS / "hang.py", path)
    return str(path)


_SESSION_START = time.time()


def _left(marker: str) -> list[psutil.Process]:
    """Processes of this test session still alive whose command line names ``marker``."""
    time.sleep(0.5)
    found = []
    for proc in psutil.process_iter(["cmdline", "status", "create_time"]):
        try:
            ours = proc.info["create_time"] >= _SESSION_START - 1  # not another run's leftovers
            if ours and any(marker in part for part in proc.info["cmdline"] or []) \
                    and proc.info["status"] != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _doctor(tmp_path: Path, *script: str, options: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "20", "--warmup", "2",
            "--out", str(tmp_path / "doc"), *options, "--", "python", *script]


@pytest.mark.slow
@pytest.mark.parametrize("mode, doing", [("sleep", "outside any training phase"),
                                         ("worker", "waiting for data")])
def test_a_hung_script_ends_within_the_stall_timeout_with_a_partial_report(tmp_path, hang, mode, doing):
    # The stall ended it, not the timeout below: its exit status and words are the stall's
    # (how soon, in seconds, is no assertion: it moves with the machine's load).
    proc = subprocess.run(_doctor(tmp_path, hang, mode, options=("--stall-timeout", "3")), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 124, proc.stderr[-2000:]
    assert "stalled: no training step for" in proc.stderr and doing in proc.stderr
    report = json.loads((tmp_path / "doc" / "report.json").read_text())
    assert report["ended"] == "stalled" and report["steps_observed"] > 0
    assert report["facts"]["stall"]["at_step"] == 12
    assert not _left(hang)


@pytest.mark.slow
def test_a_script_killed_by_sigkill_is_reported_killed_with_137(tmp_path):
    script = str(SCRIPTS / "self_kill.py")
    proc = subprocess.run(_doctor(tmp_path, script), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 137, proc.stderr[-2000:]
    assert "killed by SIGKILL" in proc.stderr and "out of memory?" in proc.stderr
    report = json.loads((tmp_path / "doc" / "report.json").read_text())
    assert report["ended"] == "killed" and report["exit_code"] == 137 and report["facts"]["signal"] == "SIGKILL"
    # Killed at its 12th step, 2 of warm-up: nothing runs in it after SIGKILL, so what it
    # had flushed is what is kept: at least half of the 10 steps recorded (it kept 1 when
    # only the first step and every 5 s were flushed).
    assert report["steps_observed"] >= 5, report["steps_observed"]
    assert not _left(script)


def _script_started(script: str) -> bool:
    """The observed script itself runs (torchboost's own command line names it too)."""
    return any("torchboost.cli" not in " ".join(p.info["cmdline"] or []) for p in _left(script))


def _started(argv: list[str], script: str) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _script_started(script) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # into the hang
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_a_signal_to_doctor_ends_the_scripts_whole_group_and_exits_128_plus_n(tmp_path, hang, signum):
    proc = _started(_doctor(tmp_path, hang, "worker"), hang)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr[-2000:]
    assert f"stopped by {signal.Signals(signum).name}" in stderr
    assert not _left(hang)


@pytest.mark.slow
def test_the_script_dies_with_a_killed_torchboost(tmp_path, hang):
    proc = _started(_doctor(tmp_path, hang, "sleep"), hang)
    os.kill(proc.pid, signal.SIGKILL)  # no handler can run: the kernel ends the child
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _left(hang) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _left(hang)


@pytest.mark.slow
def test_tune_on_a_hung_script_ends_with_the_stall_not_a_wait(tmp_path, hang):
    # The stall ended it, not the 20 s budget (whose end says "budget"): the baseline failed stalled.
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--budget", "20", "--stall-timeout", "3",
                           "--out", str(tmp_path / "tune"), "--config", str(tmp_path / "torchboost.toml"),
                           "--", "python", hang, "sleep"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "the baseline run failed: stalled" in proc.stderr
    assert not _left(hang)


@pytest.mark.slow
def test_a_diagnosis_cut_by_the_budget_is_not_called_a_failed_baseline(tmp_path, hang):
    # The same hung script with a stall timeout longer than the budget: the budget ends the
    # diagnosis, and the script did not fail (the stall test above is the twin that did).
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--budget", "10", "--stall-timeout", "300",
                           "--out", str(tmp_path / "tune"), "--config", str(tmp_path / "torchboost.toml"),
                           "--", "python", hang, "sleep"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "the diagnosis did not finish within --budget 10 s" in proc.stderr
    assert "it had run 12 steps by then" in proc.stderr  # hang.py sleeps at its 13th
    assert "larger --budget" in proc.stderr and "baseline run failed" not in proc.stderr
    assert not _left(hang)


@pytest.mark.slow
def test_tune_shows_the_scripts_traceback_when_the_baseline_crashes(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import torch\n\n\ndef load():\n    raise ValueError('my bug')\n\n\nload()\n")
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--budget", "20",
                           "--out", str(tmp_path / "tune"), "--config", str(tmp_path / "torchboost.toml"),
                           "--", "python", str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr and 'line 5, in load' in proc.stderr
    assert "ValueError: my bug" in proc.stderr
