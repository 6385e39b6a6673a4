"""A stop says only what was ended: a helper the script detached with setsid is named as still running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from torchboost.observe.child import survivors

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_survivors_names_the_living_and_skips_the_ended():
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    try:
        tree = [psutil.Process(helper.pid)]
        assert survivors(tree) == [f"pid {helper.pid} ({sys.executable} -c import time; time.sleep(60))"]
    finally:
        helper.kill()
        helper.wait()
    assert survivors(tree) == []  # the twin: once ended, it is not named


@pytest.mark.slow
@pytest.mark.parametrize("how", ["detached", "attached"])
def test_ctrl_c_names_a_detached_helper_that_lives_on(tmp_path, how):
    pid_file = tmp_path / "helper.pid"
    doctor = subprocess.Popen([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5000",
                               "--out", str(tmp_path / "report"), "--", "python",
                               str(SCRIPTS / "detached_helper.py"), str(pid_file), how],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not pid_file.exists() and time.monotonic() < deadline and doctor.poll() is None:
        time.sleep(0.2)
    helper = int(pid_file.read_text())
    try:
        doctor.send_signal(signal.SIGINT)
        err = doctor.communicate(timeout=120)[1]
        assert doctor.returncode == 130, err
        if how == "detached":
            assert _alive(helper)
            assert f"still running, detached from it (setsid): pid {helper} (" in err
        else:  # the twin: a helper in the script's group is ended, and nothing is named
            assert not _alive(helper)
            assert "the script and its processes were ended" in err and "still running" not in err
    finally:
        if _alive(helper):
            os.kill(helper, signal.SIGKILL)  # the detached helper this test made the script start
