"""torchrun jobs under doctor and run: every rank observed or applied to (2 gloo processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost.process.launch import Launch, UsageError, parse_launch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PROBE = str(SCRIPTS / "ddp_probe.py")
TORCHRUN = ["torchrun", "--standalone", "--nproc-per-node", "2"]
BOUNDS = ("data", "communication", "compute", "python", "host", "memory")


def test_torchrun_and_its_module_form_are_read_by_torchruns_own_parser():
    launch = parse_launch([*TORCHRUN, PROBE, "out", "--lr=3"])
    assert launch == Launch([PROBE, "out", "--lr=3"], ("--standalone", "--nproc-per-node", "2"))
    same = parse_launch(["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "-m", "pkg.train", "x"])
    assert same.target == ["-m", "pkg.train", "x"] and same.torchrun == ("--nproc_per_node=2",)
    argv = launch.argv("torchboost.observe.bootstrap", "spec.json")
    assert argv[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    at = argv.index("torchboost.observe.bootstrap")
    assert argv[at - 1:] == ["-m", "torchboost.observe.bootstrap", "spec.json", "--", PROBE, "out", "--lr=3"]
    assert parse_launch(["python", PROBE]).torchrun is None


@pytest.mark.parametrize("command, message", [
    (["torchrun", "--nproc-per-node", "2", "missing.py"], "script not found: missing.py"),
    (["torchrun", "--no-python", "bash", "x.sh"], "--no-python is not supported"),
])
def test_unusable_torchrun_commands_say_why(command, message):
    with pytest.raises(UsageError, match=message):
        parse_launch(command)


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchboost.cli", *argv], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.slow
def test_doctor_observes_every_rank_of_a_torchrun_job(tmp_path):
    proc = _cli("doctor", "--steps", "6", "--warmup", "2", "--out", str(tmp_path / "doc"), "--json", "--",
                *TORCHRUN, PROBE, str(tmp_path / "probe"), "30", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    job = report["job"]
    assert job["world_size"] == 2 and job["ranks_observed"] == 2 and job["slowest_rank"] in (0, 1)
    slowest = report["ranks"][job["slowest_rank"]]
    assert report["step_time_ms"] == slowest["step_time_ms"]  # the job's figures are the slowest rank's
    assert job["collective_ms_per_step"] > 0  # gloo's all-reduce, from each rank's profiler window
    assert 0 <= job["collective_overlap_pct"] <= 100
    for rank in report["ranks"]:
        # the phases rest on the rank's typical steps, those within 1.5x of its median
        median = rank["step_time_ms"]["median"]
        assert median / 1.5 <= sum(rank["phase_ms"].values()) <= median * 1.5
    assert "A job of 2 ranks" in report["notes"][0]
    for name in ("facts.json", "facts.rank1.json"):  # each rank's DDP wrapper and profiled phases
        facts = json.loads((tmp_path / "doc" / name).read_text())
        ddp, phases = facts["distributed"], facts["profile"]["phases"]
        assert ddp["ddp"] and ddp["world_size"] == 2 and ddp["backend"] == "gloo" and not ddp["find_unused_parameters"]
        assert sum(ddp["bucket_bytes"]) == ddp["grad_bytes"] == (32 * 256 + 256 + 256 * 4 + 4) * 4
        assert {"step", "forward", "backward", "optimizer"} <= set(phases)
        assert 0 <= phases["backward"]["collective_ms"] <= phases["backward"]["wall_ms"]
        assert 0 < phases["forward"]["op_ms"] <= phases["forward"]["wall_ms"]
    assert report["headroom"] is None or report["headroom"]["bound"] in BOUNDS


@pytest.mark.slow
def test_a_rank_the_doctor_stopped_leaves_with_its_process_group_destroyed(tmp_path):
    # Stopped mid-loop, a rank never reaches its own clean-up; left to the interpreter's
    # end, gloo's threads can abort it (SIGABRT) after a clean stop, now and then.
    proc = _cli("doctor", "--steps", "3", "--warmup", "1", "--out", str(tmp_path / "doc"), "--json", "--",
                *TORCHRUN, PROBE, str(tmp_path / "probe"), "30", "--plain-end", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("process group up at exit: False") == 2, proc.stderr[-3000:]
    assert "process group up at exit: True" not in proc.stderr


def _run_job(tmp_path: Path, toml: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    (tmp_path / "torchboost.toml").write_text(toml)
    proc = _cli("run", "--", *TORCHRUN, PROBE, str(tmp_path / "probe"), "4", cwd=tmp_path)
    assert proc.returncode == 0, "\n".join(line for line in proc.stderr.splitlines()
                                           if not line.startswith("torchboost run:"))[-3000:]
    return proc, [json.loads((tmp_path / "probe" / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_run_applies_the_settings_on_every_rank(tmp_path):
    proc, seen = _run_job(tmp_path, "[cpu]\nthreads = 2\n[loader]\nnum_workers = 1\n")
    assert [s["rank"] for s in seen] == [0, 1]
    assert all(s["threads"] == 2 and s["num_workers"] == 1 for s in seen), seen
    assert proc.stderr.count("torchboost run: applying") == 1  # rank 0 speaks for the job


@pytest.mark.slow
def test_run_without_the_settings_leaves_torchruns_defaults(tmp_path):
    """The broken twin of the test above: the same read-back without the settings sees other values."""
    _, seen = _run_job(tmp_path, '[cpu]\nthreads = "keep"\n')
    assert all(s["threads"] == 1 and s["num_workers"] == 0 for s in seen), seen  # torchrun's OMP_NUM_THREADS=1
