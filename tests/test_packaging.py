"""What a user outside this repository gets: the command as a module, the licence the
package declares, its type information, a changelog of this version."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from torchboost import __version__

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_python_m_torchboost_prints_the_version():
    done = subprocess.run([sys.executable, "-m", "torchboost", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, f"torchboost {__version__}")


def test_the_license_is_the_one_pyproject_declares():
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a pointer to it


def test_the_changelog_has_this_version():
    assert f"## {__version__}" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_the_wheel_carries_py_typed_and_the_license(tmp_path):
    tree = tmp_path / "tree"  # a copy: the build leaves its folders where it runs
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(tree)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    names = zipfile.ZipFile(next(tmp_path.glob("torchboost-*.whl"))).namelist()
    assert "torchboost/py.typed" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") or name.endswith(".dist-info/LICENSE") for name in names)
