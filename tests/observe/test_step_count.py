"""The parent's word on how a run ended: the child's step count and real exit code over its last facts."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import deque
from pathlib import Path

import pytest

from torchboost.evidence.observed import Facts
from torchboost.observe.parent import supervise
from torchboost.observe.spec import StepCounter, read_count, reconcile

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_the_count_is_read_back_after_the_writer_is_gone(tmp_path):
    assert read_count(tmp_path / "steps.count") is None  # never written
    counter = StepCounter(tmp_path / "steps.count")
    counter.set(3)
    counter.set(10)
    del counter
    assert read_count(tmp_path / "steps.count").boundaries == 10


def _stale() -> Facts:
    """What the child wrote at its first recorded step, before it called os._exit(3) at step 10."""
    return Facts(ended="finished", exit_code=0, steps_seen=6, warmup_steps=5)


@pytest.mark.parametrize("facts, code, count, corrected", [
    (_stale(), 3, 10, ("exited", 3, 10)),
    (_stale(), 0, 10, ("exited", 0, 10)),  # os._exit(0): the count alone shows the facts are stale
    # The twins: facts written at the run's end already say what happened, and stay.
    (Facts(ended="crashed", exit_code=3, steps_seen=10), 3, 10, ("crashed", 3, 10)),
    (Facts(ended="stopped", exit_code=0, steps_seen=28), 0, 28, ("stopped", 0, 28)),
    (Facts(ended="killed", exit_code=137, steps_seen=6, signal="SIGKILL"), 137, 12, ("killed", 137, 12)),
])
def test_facts_that_missed_the_runs_end_are_corrected(facts, code, count, corrected):
    reconcile(facts, code, count)
    assert (facts.ended, facts.exit_code, facts.steps_seen) == corrected


class _Exited:
    returncode = 3


@pytest.mark.parametrize("broken", [False, True])
def test_the_parent_rewrites_the_facts_of_a_run_that_ended_itself(tmp_path, monkeypatch, broken):
    (tmp_path / "facts.json").write_text(json.dumps(_stale().to_dict()))
    if broken:  # the old parent: the child's last write is taken as it is
        monkeypatch.setattr(supervise, "reconcile", lambda facts, code, count: False)
    run = supervise._collect(tmp_path, _Exited(), deque(), False, count=10)
    on_disk = json.loads((tmp_path / "facts.json").read_text())
    said = (run.facts.ended, run.facts.exit_code, run.steps_seen, on_disk["ended"], on_disk["exit_code"])
    assert (said == ("exited", 3, 10, "exited", 3)) is not broken
    if broken:
        assert said[0] == "finished" and said[1] == 0  # what did not happen


@pytest.mark.parametrize("seen, words", [
    (2, "the script exited with status 3 after 2 training step(s), before any was recorded"),
    (0, "the script exited with status 3 before completing a training step"),  # the twin: none ran
])
@pytest.mark.parametrize("facts", [None, Facts(warmup_steps=5, steps_seen=2)])
def test_an_exit_during_warm_up_says_how_many_steps_ran(tmp_path, seen, words, facts):
    """With the child's facts written too (a crash at step 3, caught): the exit is said, not
    "Lower --warmup", which was the advice for a script that crashed."""
    from rich.console import Console

    from torchboost.cli.doctor import _explain_no_steps

    console = Console(record=True, width=300)
    _explain_no_steps(supervise.ObservedRun(facts=facts, exit_code=3, stderr_tail="", out_dir=tmp_path,
                                            steps_seen=seen), console)
    text = console.export_text()
    assert words in text and "Lower --warmup" not in text


@pytest.mark.slow
def test_doctor_reports_an_os_exit_as_what_it_was(tmp_path):
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--out", str(out), "--", "python",
                           str(SCRIPTS / "os_exit.py"), "10"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "ended its own process (os._exit or the like) after 10 steps, exit code 3" in done.stderr
    report = json.loads((out / "report.json").read_text())
    assert (report["ended"], report["exit_code"]) == ("exited", 3)
    assert json.loads((out / "facts.json").read_text())["steps_seen"] == 10


@pytest.mark.parametrize("stalled", [True, False])
def test_a_torchrun_job_whose_rank_stalled_exits_124_not_torchruns_1(tmp_path, stalled):
    """One rank of a torchrun job hung: its watchdog ended it, torchrun said only that a rank
    failed (1), and the doctor exited 1 where a stall is documented as 124. Twin: a rank that
    crashed keeps torchrun's status."""
    from torchboost.observe.spec import rank_file

    class _Torchrun:
        returncode = 1

    ended = "stalled" if stalled else "crashed"
    for rank in (0, 1):
        facts = Facts(ended=ended if rank == 0 else "killed", exit_code=1, steps_seen=30, rank=rank, world_size=2)
        (tmp_path / rank_file("facts.json", rank)).write_text(json.dumps(facts.to_dict()))
    run = supervise._collect(tmp_path, _Torchrun(), deque(), False, count=30)
    assert run.exit_code == (124 if stalled else 1)
