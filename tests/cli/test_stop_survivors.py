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

from torchboost.process.process_group import end_group, survivors

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
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


_STARTS_A_HELPER = """
import subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                          start_new_session=sys.argv[1] == "detached")
print(helper.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["detached", "attached"])
def test_ending_the_group_names_only_a_detached_helper(how):
    child = subprocess.Popen([sys.executable, "-c", _STARTS_A_HELPER, how], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)  # in a group of its own, as the observed script
    helper = int(child.stdout.readline())
    try:
        left = end_group(child, signal.SIGTERM)
        if how == "detached":
            assert left == [f"pid {helper} ({sys.executable} -c import time; time.sleep(300))"] and _alive(helper)
        else:  # the twin: a helper in the group is ended with it, and nothing is named
            assert left == [] and not _alive(helper)
    finally:
        if _alive(helper):
            os.kill(helper, signal.SIGKILL)
        child.stdout.close()


@pytest.mark.slow
def test_ctrl_c_names_a_detached_helper_that_lives_on(tmp_path):
    pid_file = tmp_path / "helper.pid"
    doctor = subprocess.Popen([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5000",
                               "--out", str(tmp_path / "report"), "--", "python",
                               str(SCRIPTS / "detached_helper.py"), str(pid_file), "detached"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not pid_file.exists() and time.monotonic() < deadline and doctor.poll() is None:
        time.sleep(0.2)
    helper = int(pid_file.read_text())
    try:
        doctor.send_signal(signal.SIGINT)
        err = doctor.communicate(timeout=120)[1]
        assert doctor.returncode == 130, err
        assert _alive(helper)
        assert f"still running, detached from it (setsid): pid {helper} (" in err
        assert "the script and its processes were ended" not in err  # its twin is the test above
    finally:
        if _alive(helper):
            os.kill(helper, signal.SIGKILL)  # the detached helper this test made the script start
