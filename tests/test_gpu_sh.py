"""benchmarks/gpu.sh from a bare environment, as the GPU machine has it: no torchboost, no
tomli-w, no network; and its results gathered from a hand-made H100 run.

The environment: a fresh virtual environment whose site-packages holds links to this
interpreter's packages (torch and the rest) except torchboost and tomli-w, with pip pointed
at an address that answers nothing and told to use no index. The tree: a copy of this
checkout's files (tracked and untracked, not ignored: what is copied to the GPU machine), so
that what the script writes, or other work in this checkout, cannot be confused. On a
machine without a CUDA GPU the whole command must install from benchmarks/wheels, end its
smoke stage with the one line ``no CUDA GPU: N checks skipped``, say in the full stage that
it measured nothing, exit 0 with at most 6 files in OUT, and leave the tree as it was; its
stages' limits, read from the script, must add up with the set-up to 7 minutes. A failed
smoke stage (the wheels taken away, or its script broken) must still be followed by the full
stage.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tarfile
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
import torch

_RUNS_GPU_SH = [
    pytest.mark.slow,
    pytest.mark.skipif(torch.cuda.is_available(), reason="checks gpu.sh's no-GPU path; on a GPU run gpu.sh itself"),
    pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                       reason="needs bash and coreutils' timeout"),
]
"""The marks of each test that runs gpu.sh."""


def _runs_gpu_sh(test):
    for mark in _RUNS_GPU_SH:
        test = mark(test)
    return test

REPO = Path(__file__).resolve().parents[1]
GPU_SH = REPO / "benchmarks" / "gpu.sh"
ONE_COMMAND_S = 420
"""The whole run on an H100, seconds: with the machine's start-up, a rerun of a stage fits the session."""
MOST_FILES = 6
"""Files gpu.sh may leave in OUT: fewer than the GPU machine sends back."""
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


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())


def _stage_lines(stdout: str, stage: str) -> list[str]:
    """The lines the stage printed, from its ``== STAGE`` line to its ``== STAGE:`` line."""
    lines = stdout.splitlines()
    first = lines.index(next(line for line in lines if line.startswith(f"== {stage} (")))
    last = lines.index(next(line for line in lines if line.startswith(f"== {stage}:")))
    return lines[first + 1:last]


def _limits_in_script() -> dict[str, int]:
    text = GPU_SH.read_text(encoding="utf-8")
    return {name.lower(): int(value) for name, value in re.findall(r"^(SETUP|SMOKE|FULL)_S=(\d+)", text, re.M)}


@pytest.fixture(scope="module")
def whole_run(bare) -> tuple[subprocess.CompletedProcess, Path, Path, set]:
    """``gpu.sh OUT`` once, in a fresh copy of the tree: its run, OUT, the tree, the tree before."""
    env, root = bare
    tree = _copy_tree(root / "tree")
    before = _snapshot(tree)
    return _gpu_sh([str(root / "out")], tree, env), root / "out", tree, before


@_runs_gpu_sh
def test_the_whole_command_says_no_cuda_gpu_in_both_stages_and_leaves_three_files(whole_run):
    done, out, tree, before = whole_run
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[1].startswith("install: ok") and "PASS  import tomli_w: 1.2.0" in lines, done.stdout
    assert "PASS  import torchboost: 0.1.0" in lines, done.stdout
    smoke = _stage_lines(done.stdout, "smoke")
    last = smoke[-1].split()
    assert last[:3] == ["no", "CUDA", "GPU:"] and last[4:] == ["checks", "skipped"] and int(last[3]) >= 1, smoke[-1]
    assert _stage_lines(done.stdout, "full")[-1].startswith("no CUDA GPU: the full stage measures on one"), done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    assert _snapshot(tree) == before  # no bytecode, no pytest cache, no report in the tree
    assert _files(out) == ["logs.tar.gz", "results.json", "results.md"] and len(_files(out)) <= MOST_FILES
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [(s["name"], s["status"]) for s in results["stages"]] == [("setup", "ok"), ("smoke", "ok"),
                                                                      ("full", "no gpu")]
    assert results["smoke"]["skip"] == int(last[3]) and results["smoke"]["fail"] == 0
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert {"smoke/smoke.json", "smoke/gpu-tests.xml", "smoke/smoke.log", "stages.tsv"} <= set(names), names


@_runs_gpu_sh
def test_the_stages_limits_read_from_the_script_add_up_with_the_set_up_to_seven_minutes(whole_run):
    limits = _limits_in_script()
    assert set(limits) == {"setup", "smoke", "full"}, limits
    assert limits["smoke"] <= 90
    assert sum(limits.values()) <= ONE_COMMAND_S, limits
    done, out, _, _ = whole_run  # the run used these: each stage is recorded under the script's limit
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert {k: results["limits_s"][k] for k in limits} == limits
    assert {s["name"]: s["limit_s"] for s in results["stages"]} == limits
    assert f"smoke {limits['smoke']} s, full {limits['full']} s" in done.stdout.splitlines()[0]


@_runs_gpu_sh
def test_only_full_reruns_that_stage_and_keeps_the_earlier_smoke(whole_run, bare):
    env, root = bare
    _, out, tree, _ = whole_run
    again = root / "out-again"
    shutil.copytree(out, again)
    done = _gpu_sh(["--only", "full", str(again)], tree, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "== smoke (" not in done.stdout and "== full (" in done.stdout
    results = json.loads((again / "results.json").read_text(encoding="utf-8"))
    assert [s["name"] for s in results["stages"]] == ["setup", "smoke", "full"]  # the earlier smoke kept
    with tarfile.open(again / "logs.tar.gz") as tar:
        assert "smoke/smoke.json" in tar.getnames()
    assert _gpu_sh(["--only", "gpu", str(again)], tree, env).returncode == 2


@_runs_gpu_sh
def test_without_the_wheels_the_smoke_fails_and_the_full_stage_still_runs(bare):
    """The broken twin: the bare environment has no tomli-w, so the wheels are what makes the smoke pass."""
    env, root = bare
    tree = _copy_tree(root / "tree-no-wheels", wheels=False)
    done = _gpu_sh([str(root / "out-no-wheels")], tree, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[1].startswith("install: FAILED"), done.stdout
    assert any(line.startswith("FAIL  import tomli_w") for line in _stage_lines(done.stdout, "smoke")), done.stdout
    assert _stage_lines(done.stdout, "full")[-1].startswith("no CUDA GPU: the full stage measures on one")
    assert done.stdout.splitlines()[-1] == "gpu.sh: failed: smoke"


@_runs_gpu_sh
def test_a_smoke_stage_that_fails_on_purpose_is_followed_by_the_full_stage(bare):
    env, root = bare
    tree = _copy_tree(root / "tree-broken-smoke")
    (tree / "benchmarks" / "gpu_smoke.py").write_text("import sys\nprint('smoke broken on purpose')\nsys.exit(1)\n",
                                                      encoding="utf-8")
    done = _gpu_sh([str(root / "out-broken-smoke")], tree, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "== smoke: failed (exit status 1" in done.stdout
    assert _stage_lines(done.stdout, "full")[-1].startswith("no CUDA GPU: the full stage measures on one")
    results = json.loads((root / "out-broken-smoke" / "results.json").read_text(encoding="utf-8"))
    assert {s["name"]: s["status"] for s in results["stages"]} == {"setup": "ok", "smoke": "failed", "full": "no gpu"}


def _gpu_results():
    spec = importlib.util.spec_from_file_location("_gpu_results", REPO / "benchmarks" / "gpu_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _h100_run(work: Path) -> None:
    """A full stage's output as an H100 would leave it: hand-made figures."""
    full = work / "full"
    (full / "tune").mkdir(parents=True)
    (work / "plan.tsv").write_text("total\t420\nsetup\t30\nsmoke\t90\nfull\t300\n", encoding="utf-8")
    (work / "stages.tsv").write_text("setup\tok\t0\t9\t30\nfull\tok\t0\t280\t300\n", encoding="utf-8")
    (full / "parts.tsv").write_text("gemm\tok\t0\t20\t40\ntune\tok\t4\t150\t165\n", encoding="utf-8")
    machine = {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "cuda": "13.0"}
    (full / "gemm.json").write_text(json.dumps({**machine, "n": 8192, "tflops": {"bf16": 700.0, "fp16": 710.0,
                                                                                "tf32": 350.0, "fp32": 50.0}}))
    row = {"math": "fp32", "batch": 16, "context": 1024, "median_step_ms": 400.0, "tokens_per_s": 40960.0,
           "achieved_tflops": 35.0, "peak_bytes": 30 * 2**30, "compile": {"mode": "off", "first_call_s": None,
                                                                          "fell_back": False, "error": None}}
    tuned = {**row, "math": "bf16", "tokens_per_s": 409600.0, "achieved_tflops": 350.0, "median_step_ms": 40.0,
             "compile": {"mode": "default", "first_call_s": 41.0, "fell_back": True,
                         "error": "RuntimeError: mix of legacy and new APIs"}}
    (full / "gpt.json").write_text(json.dumps({**machine, "batch": 16, "tuned_config": "torchboost.unverified.toml",
                                               "runs": {"naive": row, "tuned": tuned}}))
    (full / "tune" / "report.json").write_text(json.dumps({
        "status": "unverified", "settings": {"precision.mode": "bf16"}, "speedup": None, "search_speedup": 3.1,
        "verdict": "", "error": None, "elapsed_s": 149.0,
        "decisions": [{"change": "precision.mode=bf16", "status": "kept", "ratio": 0.32, "verdict": ""}],
        "findings": [{"id": "compute.fp32", "title": "fp32 matmuls", "expected_speedup": 3.0}]}))


def test_an_h100_run_is_gathered_with_both_datasheets_mfu_and_the_compile_fall_back(tmp_path):
    gather = _gpu_results()
    _h100_run(tmp_path / "work")
    assert gather.main([str(tmp_path / "work"), str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    peaks = results["peaks"]
    assert peaks["machine"] == "H100 SXM" and set(peaks["datasheet_tflops"]) == {"H100 SXM", "H200 SXM"}
    naive, tuned = results["gpt"]["naive"], results["gpt"]["tuned"]
    assert tuned["mfu"]["datasheet_bf16"] == pytest.approx(350.0 / 989.4)
    assert tuned["mfu"]["measured_bf16"] == pytest.approx(0.5) and tuned["speedup_vs_naive"] == pytest.approx(10.0)
    assert naive["mfu"]["measured_own_math"] == pytest.approx(35.0 / 50.0)
    assert results["tune"]["exit_code"] == 4 and results["tune"]["status"] == "unverified"
    text = (tmp_path / "out" / "results.md").read_text(encoding="utf-8")
    assert "| H100 SXM datasheet (this machine) | 989.4 | 989.4 | 494.7 | 66.9 |" in text
    assert "| H200 SXM datasheet | 989.4 |" in text
    assert "fell back to eager: RuntimeError: mix of legacy and new APIs" in text
    assert "| full: tune | ok | 4 | 150 (165) |" in text


def test_a_device_that_is_neither_an_h100_nor_an_h200_claims_no_datasheet_mfu(tmp_path):
    """The twin: the same figures on another card keep the measured MFU and claim no datasheet one."""
    gather = _gpu_results()
    _h100_run(tmp_path / "work")
    for name in ("gemm.json", "gpt.json"):
        path = tmp_path / "work" / "full" / name
        path.write_text(path.read_text().replace("H100 80GB HBM3", "A100-SXM4-80GB"))
    assert gather.main([str(tmp_path / "work"), str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert results["peaks"]["machine"] is None
    assert results["gpt"]["tuned"]["mfu"]["datasheet_bf16"] is None
    assert results["gpt"]["tuned"]["mfu"]["measured_bf16"] == pytest.approx(0.5)
