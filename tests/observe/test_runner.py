"""Command parsing for the child: the forms of command the doctor accepts."""

from __future__ import annotations

import sys

import pytest

from torchboost.observe import UsageError, parse_command, run_observed


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
        run_observed(["python", str(script)], steps=0, out_dir=tmp_path)
