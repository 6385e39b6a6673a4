"""Command parsing for the child: the forms of command the doctor accepts."""

from __future__ import annotations

import sys

import pytest

from torchboost.observe import RunRequest, UsageError, parse_command, run_observed


def test_python_script_and_bare_script_give_the_same_target(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    assert parse_command(["python", str(script), "--lr", "1"]) == [str(script), "--lr", "1"]
    assert parse_command([str(script), "--lr", "1"]) == [str(script), "--lr", "1"]
    assert parse_command([sys.executable, str(script)]) == [str(script)]
    assert parse_command(["python3.11", str(script)]) == [str(script)]


def test_module_form_keeps_dash_m():
    assert parse_command(["python", "-m", "pkg.train", "-x"]) == ["-m", "pkg.train", "-x"]


@pytest.mark.parametrize("command, message", [
    ([], "no command"),
    (["python"], "no script"),
    (["python", "-m"], "no module"),
    (["python", "-X", "dev", "t.py"], "not supported"),
    (["python", "missing_script_xyz.py"], "script not found"),
])
def test_bad_commands_say_what_to_do(command, message):
    with pytest.raises(UsageError, match=message):
        parse_command(command)


def test_steps_below_one_is_a_usage_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    with pytest.raises(UsageError, match="--steps"):
        run_observed(RunRequest(command=["python", str(script)], steps=0, out_dir=tmp_path))


def _observed(tmp_path, *, steps_seen: int, exit_code: int):
    from torchboost.evidence.observed import Facts
    from torchboost.observe import ObservedRun

    return ObservedRun(facts=Facts(warmup_steps=5), exit_code=exit_code, stderr_tail="",
                       out_dir=tmp_path, steps_seen=steps_seen)


@pytest.mark.parametrize("steps_seen, exit_code, message", [
    (0, 0, "no training step seen"),
    (0, 3, "exited with status 3 before completing a training step"),
    (4, 0, "all within the 5 warm-up steps"),
])
def test_why_nothing_was_recorded_is_explained(tmp_path, steps_seen, exit_code, message):
    from rich.console import Console

    from torchboost.cli.doctor import _explain_no_steps

    console = Console(record=True, width=300)
    _explain_no_steps(_observed(tmp_path, steps_seen=steps_seen, exit_code=exit_code), console)
    assert message in console.export_text()


def test_a_jobs_facts_are_its_slowest_ranks():
    from torchboost.diagnose import Facts, StepRecord
    from torchboost.observe.parent.supervise import job_facts

    fast = Facts(rank=0, world_size=2, steps=[StepRecord(i, 10.0) for i in range(4)])
    slow = Facts(rank=1, world_size=2, steps=[StepRecord(i, 12.0) for i in range(4)])
    assert job_facts([fast, slow]) is slow
    tied = Facts(rank=1, world_size=2, steps=[StepRecord(i, 10.0) for i in range(4)])
    assert job_facts([fast, tied]) is fast  # a tie speaks as rank 0
