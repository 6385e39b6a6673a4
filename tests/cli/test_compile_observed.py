"""torch.compile under the doctor: compiling is not a stall, and its graph breaks and
recompiles are the ones PyTorch's own logs (``TORCH_LOGS=graph_breaks,recompiles``) name
in the same run."""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(__file__).resolve().parents[1] / "scripts" / "compile_breaks.py")
STEPS = "9"


def _doctor(tmp_path: Path, mode: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "torchboost.cli", "doctor", "--full", "--warmup", "2", "--steps", "3",
            "--stall-timeout", "2", "--out", str(tmp_path / "doc"), "--", "python", SCRIPT, mode, STEPS]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)


def _reference(stderr: str) -> tuple[set[str], collections.Counter[str]]:
    """Graph-break places and recompiles per function of the script's own code, as PyTorch's
    own logs give them."""
    breaks = set(re.findall(r"Graph break in user code at (\S+compile_breaks\.py:\d+)", stderr))
    recompiles = collections.Counter(re.findall(r"Recompiling function (\S+) in \S+compile_breaks\.py:", stderr))
    return breaks, recompiles


def _agrees(section: dict, breaks: set[str], recompiles: collections.Counter[str]) -> bool:
    ours_breaks = {gb["where"] for gb in section["graph_breaks"]}
    ours_recompiles = collections.Counter({rc["function"]: rc["count"] for rc in section["recompiles"]})
    return ours_breaks == breaks and ours_recompiles == recompiles


@pytest.mark.slow
def test_a_compile_longer_than_the_stall_timeout_is_not_a_stall_and_its_breaks_match_pytorchs_logs(tmp_path):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),  # cold: seconds of compiling
           "TORCH_LOGS": "graph_breaks,recompiles"}  # the reference, in the same process
    proc = _doctor(tmp_path, "both", env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "doc" / "report.json").read_text())
    section = report["compile"]
    assert report["ended"] == "finished" and report["facts"]["stall"] is None
    assert section["compile_s"] > 2 and section["cache"] == "cold" and section["cache_misses"] > 0
    assert section["first_step_ms"] > 2000  # the first step held the compile the stall clock excused
    lines = {int(gb["where"].rsplit(":", 1)[1]) for gb in section["graph_breaks"]}
    source = Path(SCRIPT).read_text().splitlines()
    assert {source[n - 1].strip().split("(")[0] for n in lines} == {"if h.sum().item() > 1e9:  # graph break: a "
                                                                    "Python number from a tensor".split("(")[0],
                                                                    "print"}
    assert {rc["kind"] for rc in section["recompiles"]} >= {"shape"}
    assert "torch.compile:" in proc.stdout and "Graph break at" in proc.stdout

    breaks, recompiles = _reference(proc.stderr)
    assert breaks and recompiles
    assert _agrees(section, breaks, recompiles), (section, breaks, recompiles)
    # Twin: a reader that placed each break at its function's first line would not agree.
    header = f"{SCRIPT}:22"
    broken = {**section, "graph_breaks": [{**gb, "where": header} for gb in section["graph_breaks"]]}
    assert not _agrees(broken, breaks, recompiles)


@pytest.mark.slow
def test_the_twin_a_forward_that_sleeps_as_long_is_a_stall(tmp_path):
    proc = _doctor(tmp_path, "sleep", dict(os.environ))
    assert proc.returncode == 124, proc.stderr[-3000:]
    assert "in the forward pass" in proc.stderr
    report = json.loads((tmp_path / "doc" / "report.json").read_text())
    assert report["ended"] == "stalled" and report["compile"] is None
