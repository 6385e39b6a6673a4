"""The script run as ``__main__`` sees what ``python`` shows it, a symbolically linked one too.

``python links/train.py``, where ``links/train.py`` links to ``real/train.py``, puts the real
file's folder first on the path (``import helper`` finds ``real/helper.py``) and leaves
``__file__`` and ``sys.argv[0]`` as typed. Plain python, in a subprocess, is the reference;
the twins put the link's own folder first, as torchboost did, and must fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost.process import target
from torchboost.process.target import run_target

HELPER = "helper_beside_the_real_script"
TRAIN = f"""import json, sys
import {HELPER}
print(json.dumps({{"path0": sys.path[0], "file": __file__, "argv0": sys.argv[0],
                  "helper": {HELPER}.__file__}}))
"""


def _linked_script(tmp_path: Path) -> Path:
    """``real/train.py`` and the module it imports beside it, ``links/train.py`` linking to it."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "train.py").write_text(TRAIN)
    (tmp_path / "real" / f"{HELPER}.py").write_text("")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "train.py").symlink_to(Path("..") / "real" / "train.py")
    return tmp_path


def _python_shows(project: Path, typed: str) -> dict:
    done = subprocess.run([sys.executable, typed], cwd=project, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture
def in_process(monkeypatch, capsys):
    """``run_target`` here, its changes to the path, the arguments and the modules undone after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))

    def run(project: Path, typed: str) -> dict:
        monkeypatch.chdir(project)
        capsys.readouterr()
        run_target([typed])
        return json.loads(capsys.readouterr().out)

    yield run
    sys.modules.pop(HELPER, None)


@pytest.mark.slow
@pytest.mark.parametrize("typed", ["links/train.py", "./links/train.py", "links//train.py"])
def test_a_linked_script_sees_what_python_shows_it(tmp_path, in_process, typed):
    project = _linked_script(tmp_path)
    python = _python_shows(project, typed)
    assert python["path0"] == os.path.realpath(project / "real")  # the real file's folder
    assert python["argv0"] == typed and python["file"] == os.path.join(str(project), typed)
    assert in_process(project, typed) == python


@pytest.mark.slow
def test_twin_with_the_links_folder_first_the_helper_is_not_found(tmp_path, in_process, monkeypatch):
    project = _linked_script(tmp_path)
    monkeypatch.setattr(target, "_script_folder", lambda script: os.path.dirname(os.path.abspath(script)))
    with pytest.raises(ModuleNotFoundError, match=HELPER):
        in_process(project, "links/train.py")
    assert sys.path[0] != _python_shows(project, "links/train.py")["path0"]


@pytest.mark.slow
def test_twin_with_file_normalised_it_is_not_what_python_shows(tmp_path, in_process, monkeypatch):
    project = _linked_script(tmp_path)
    monkeypatch.setattr(target, "_main_file", os.path.abspath)
    assert in_process(project, "./links/train.py") != _python_shows(project, "./links/train.py")


def _torchboost_run(project: Path, *before: str) -> subprocess.CompletedProcess:
    """``torchboost run -- python links/train.py``, after the Python lines ``before``."""
    (project / "torchboost.toml").write_text('[cpu]\nthreads = "keep"\n')
    start = "; ".join(["import sys", *before, "from torchboost.cli import main", "sys.exit(main())"])
    return subprocess.run([sys.executable, "-c", start, "run", "--", "python", "links/train.py"],
                          cwd=project, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_torchboost_run_of_a_linked_script_imports_beside_the_real_file(tmp_path):
    project = _linked_script(tmp_path)
    done = _torchboost_run(project)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == _python_shows(project, "links/train.py")


@pytest.mark.slow
def test_twin_torchboost_run_with_the_links_folder_first_fails(tmp_path):
    project = _linked_script(tmp_path)
    done = _torchboost_run(project, "import os, torchboost.process.target as t",
                           "t._script_folder = lambda script: os.path.dirname(os.path.abspath(script))")
    assert done.returncode == 1 and f"ModuleNotFoundError: No module named '{HELPER}'" in done.stderr
