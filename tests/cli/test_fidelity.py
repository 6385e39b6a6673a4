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
