"""benchmarks/gpu.sh from a bare environment, as the GPU machine has it: no torchboost, no
tomli-w, no network.

The environment: a fresh virtual environment whose site-packages holds links to this
interpreter's packages (torch and the rest) except torchboost and tomli-w, with pip pointed
at an address that answers nothing and told to use no index. The tree: a copy of this
checkout's files (tracked and untracked, not ignored: what is copied to the GPU machine), so
that what the script writes, or other work in this checkout, cannot be confused. On a
machine without a CUDA GPU the smoke stage must install from benchmarks/wheels, end with the
one line ``no CUDA GPU: N checks skipped`` and exit 0, and leave the tree as it was; the same
copy without its wheels must fail at the install; the full stage must say "no CUDA GPU".
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(torch.cuda.is_available(), reason="checks gpu.sh's no-GPU path; on a GPU run gpu.sh itself"),
    pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                       reason="needs bash and coreutils' timeout"),
]

REPO = Path(__file__).resolve().parents[1]
_LEFT_OUT = ("torchboost", "__editable__", "tomli_w", "tomli-w")
"""Site-packages entries not linked into the bare environment (besides every .pth file)."""


def _bare_venv(root: Path) -> Path:
    """A virtual environment with pip, linking this interpreter's packages but torchboost's and tomli-w's."""
    venv.EnvBuilder(with_pip=True, symlinks=True).create(root)
    target = next((root / "lib").glob("python3*/site-packages"))
    own = set(os.listdir(target))
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        name = entry.name.lower()
        # .pth files run at start-up: the editable install's names src/; none is needed to import torch
        if entry.name in own or name.endswith(".pth") or name.startswith(_LEFT_OUT):
            continue
        (target / entry.name).symlink_to(entry)
    return root / "bin"


def _bare_env(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
           and not k.startswith("PIP_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(bin_dir.parent),
               PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull,
               PYTHONNOUSERSITE="1")
    return env


def _copy_tree(dest: Path, *, wheels: bool = True) -> Path:
    """The checkout's tracked and untracked-but-not-ignored files, copied to ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = REPO / rel
        if not source.is_file() or (not wheels and rel.startswith("benchmarks/wheels/")):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, dest / rel)
    return dest


def _snapshot(tree: Path) -> set[tuple[str, int, int]]:
    """Every folder and file under ``tree``: its path, and a file's size and modification time."""
    found = set()
    for folder, dirs, files in os.walk(tree):
        for name in dirs:
            found.add((os.path.relpath(os.path.join(folder, name), tree), -1, -1))
        for name in files:
            stat = os.stat(os.path.join(folder, name))
            found.add((os.path.relpath(os.path.join(folder, name), tree), stat.st_size, stat.st_mtime_ns))
    return found


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> tuple[dict[str, str], Path]:
    root = tmp_path_factory.mktemp("gpu-sh")
    env = _bare_env(_bare_venv(root / "venv"))
    probe = subprocess.run(["python3", "-c", "import sys, torch; print(sys.prefix)\n"
                            "for name in ('torchboost', 'tomli_w'):\n"
                            "    try:\n        __import__(name)\n        print('importable:', name)\n"
                            "    except ImportError:\n        pass"],
                           env=env, capture_output=True, text=True, cwd=root)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines() == [str(root / "venv")], probe.stdout  # torch is there, they are not
    return env, root


def _gpu_sh(args: list[str], tree: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(tree / "benchmarks" / "gpu.sh"), *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=240)


def test_smoke_installs_from_the_tree_s_wheels_and_says_no_cuda_gpu_writing_nothing_in_the_tree(bare):
    env, root = bare
    tree = _copy_tree(root / "tree")
    before = _snapshot(tree)
    done = _gpu_sh(["--smoke", str(root / "out")], tree, env)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0].startswith("install: ok") and "PASS  import tomli_w: 1.2.0" in lines, done.stdout
    assert "PASS  import torchboost: 0.1.0" in lines, done.stdout
    last = lines[-1].split()
    assert last[:3] == ["no", "CUDA", "GPU:"] and last[4:] == ["checks", "skipped"] and int(last[3]) >= 1, lines[-1]
    assert "Traceback" not in done.stdout + done.stderr
    assert _snapshot(tree) == before  # no bytecode, no pytest cache, no report in the tree
    assert (root / "out" / "gpu-tests.xml").is_file() and (root / "out" / "smoke.json").is_file()


def test_smoke_without_the_wheels_fails_at_the_install(bare):
    """The broken twin: the bare environment has no tomli-w, so the wheels are what makes it work."""
    env, root = bare
    tree = _copy_tree(root / "tree-no-wheels", wheels=False)
    done = _gpu_sh(["--smoke", str(root / "out-no-wheels")], tree, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("install: FAILED"), done.stdout
    assert "no CUDA GPU" not in done.stdout


def test_full_stage_says_no_cuda_gpu_and_exits_0(bare):
    env, root = bare
    tree = root / "tree" if (root / "tree").is_dir() else _copy_tree(root / "tree")
    done = _gpu_sh([str(root / "out-full")], tree, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("no CUDA GPU: the full stage measures on one"), done.stdout
    assert "Traceback" not in done.stdout + done.stderr
