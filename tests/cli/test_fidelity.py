"""The script sees what python would show it: __file__, sys.argv[0], sys.path[0]."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "chdir_file.py"


def _started(tmp_path: Path, *prefix: str) -> dict:
    shutil.copy(SCRIPT, tmp_path / "chdir_file.py")
    (tmp_path / "torchboost.toml").write_text('[cpu]\nthreads = "keep"\n')
    (tmp_path / "elsewhere").mkdir(exist_ok=True)
    proc = subprocess.run([*prefix, sys.executable, "chdir_file.py", str(tmp_path / "elsewhere")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("{"))
    return json.loads(line)


@pytest.mark.slow
@pytest.mark.parametrize("sub", [["run"], ["doctor", "--steps", "3", "--warmup", "1"]])
def test_the_script_sees_what_python_shows_it(tmp_path, sub):
    python = _started(tmp_path)
    assert Path(python["file"]).is_absolute() and python["found_beside"]  # what python itself does
    out = ["--out", str(tmp_path / "doc")] if sub[0] == "doctor" else []
    ours = _started(tmp_path, sys.executable, "-m", "torchboost.cli", *sub, *out, "--")
    assert ours == python


def _module_run(tmp_path: Path, module: str) -> subprocess.CompletedProcess:
    """``torchboost run -- python -m MODULE`` started as a user starts it: the console script."""
    console_script = shutil.which("torchboost") or str(Path(sys.executable).with_name("torchboost"))
    if not Path(console_script).exists():
        pytest.skip("the torchboost console script is not installed")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("import sys\nprint('ran from', sys.path[0])\n")
    (tmp_path / "torchboost.toml").write_text("[cpu]\nthreads = 1\n")
    return subprocess.run([console_script, "run", "--", "python", "-m", module], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_run_dash_m_finds_a_local_package_from_the_console_script(tmp_path):
    done = _module_run(tmp_path, "pkg.train")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"ran from {tmp_path}" in done.stdout  # the current folder first, as python -m has it


@pytest.mark.slow
def test_the_check_sees_a_module_that_is_not_there(tmp_path):
    done = _module_run(tmp_path, "pkg.missing")
    assert done.returncode != 0 and "pkg.missing" in done.stderr
