"""`torchboost run`: the script runs in torchboost's own process, with the settings applied."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost import BoostConfig

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "run_probe.py"

pytestmark = pytest.mark.slow


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, str, str]:
    proc = subprocess.Popen([sys.executable, "-m", "torchboost.cli", "run", "--", "python", str(SCRIPT), *args],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    return proc, out, err


def test_the_script_runs_in_the_same_process_with_the_settings(tmp_path):
    BoostConfig.off().replace(cpu={"threads": 1}, loader={"num_workers": 1}).to_toml(tmp_path / "torchboost.toml")
    proc, out, err = _run(tmp_path, "3")
    seen = json.loads(out.strip().splitlines()[-1])
    # No parent waits for a child: the script is torchboost's own process, so it shares its
    # one import of torch and a signal sent to it reaches the script.
    assert seen["pid"] == proc.pid
    assert (seen["threads"], seen["workers"]) == (1, 1)
    assert seen["argv"] == [str(SCRIPT), "3"] and seen["file"] == str(SCRIPT)
    assert proc.returncode == 3  # the script's own exit status
    assert "applying torchboost.toml: cpu.threads=1, loader.num_workers=1" in err


def test_without_the_settings_the_script_is_left_as_it_is(tmp_path):
    BoostConfig.off().to_toml(tmp_path / "torchboost.toml")
    proc, out, err = _run(tmp_path)
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["workers"] == 0 and proc.returncode == 0  # the twin: nothing applied, nothing changed
    assert "nothing to apply" in err


def test_a_crash_shows_the_scripts_own_traceback(tmp_path):
    BoostConfig.off().to_toml(tmp_path / "torchboost.toml")
    proc, _, err = _run(tmp_path, "crash")
    assert proc.returncode == 1
    traceback = err[err.index("Traceback"):]
    assert "ValueError: the script's own error" in traceback
    assert "torchboost" not in traceback.splitlines()[1]  # the first frame is the script's
    assert str(SCRIPT) in traceback.splitlines()[1]


def test_run_speaks_only_of_the_keys_the_file_sets(tmp_path):
    (tmp_path / "torchboost.toml").write_text('[cpu]\nthreads = 1\n[precision]\nmode = "auto"\n')
    proc, _, err = _run(tmp_path)
    assert proc.returncode == 0, err
    notes = [line for line in err.splitlines() if "resolved by the Booster only" in line]
    assert notes == ['torchboost run: precision.mode = "auto" is resolved by the Booster only; '
                     "left as the script sets it"]  # not the loader's, optimizer's... defaults


def test_run_applies_the_pyproject_table(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\n\n[tool.torchboost.cpu]\nthreads = 1\n'
                                             '[tool.torchboost.loader]\nnum_workers = 1\n')
    proc, out, err = _run(tmp_path)
    seen = json.loads(out.strip().splitlines()[-1])
    assert (seen["threads"], seen["workers"], proc.returncode) == (1, 1, 0), err
    assert "applying pyproject.toml [tool.torchboost]: cpu.threads=1, loader.num_workers=1" in err


def test_twin_a_pyproject_without_the_table_is_not_a_configuration(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mine"\n\n[tool.other.cpu]\nthreads = 1\n')
    proc, out, err = _run(tmp_path)
    assert proc.returncode == 2 and out == ""  # the script did not run
    assert "no torchboost.toml here, nor [tool.torchboost] in pyproject.toml" in err


def test_both_files_are_an_error_naming_both(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.torchboost.cpu]\nthreads = 1\n')
    BoostConfig.off().to_toml(tmp_path / "torchboost.toml")
    proc, _, err = _run(tmp_path)
    assert proc.returncode == 2
    assert "both torchboost.toml and pyproject.toml [tool.torchboost] configure torchboost" in err
