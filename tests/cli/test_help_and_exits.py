"""What the command says of itself: whole sentences in --help, compare's two forms, a least
gain read as the user meant it, the demo's closing line, tune's --json and exit status."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost.cli import _SUBCOMMANDS, main, summary
from torchboost.cli.compare import fraction
from torchboost.cli.demo import apply_hint, demo_command
from torchboost.cli.tune import NO_PROVEN_WIN, UNVERIFIED, exit_status
from torchboost.tune.config_file import TunedFor

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _help(capsys, *words: str) -> str:
    with pytest.raises(SystemExit):
        main([*words, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("name", sorted(_SUBCOMMANDS))
def test_every_description_is_a_whole_sentence(capsys, name):
    described = " ".join(_help(capsys, name).split("\n\n")[1].split())
    assert described.endswith("."), described


def test_export_says_the_trainer_in_full(capsys):
    assert "Lightning, Accelerate or the Hugging Face Trainer." in " ".join(_help(capsys, "export").split())


def test_twin_the_first_line_alone_stops_mid_sentence():
    import torchboost.cli.export as export

    assert not export.__doc__.splitlines()[0].endswith(".")  # what --help showed before
    assert summary(export.__doc__).endswith("Hugging Face Trainer.")


def test_compares_usage_shows_both_forms(capsys):
    usage = _help(capsys, "compare").split("\n\n")[0]
    assert "-- python a.py ARGS -- python b.py ARGS" in usage
    assert "--config A.toml --config B.toml [options] -- python train.py ARGS" in usage


@pytest.mark.parametrize("text, value", [("0.03", 0.03), ("3%", 0.03), ("0", 0.0), ("12.5%", 0.125)])
def test_a_least_gain_is_a_fraction_or_a_percentage(text, value):
    assert fraction(text) == pytest.approx(value)


def test_twin_a_least_gain_of_3_is_refused_not_read_as_300_percent(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["compare", "--min-gain", "3", "--", "python", "a.py", "--", "python", "b.py"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "which is 300%; for 3% write 0.03 or 3%" in err


def test_the_demos_closing_line_is_the_command_it_tuned():
    command = demo_command("vision")
    hint = apply_hint(Path("torchboost-demo/torchboost.toml"), command)
    typed = shlex.split(hint.partition(" -- ")[2])
    assert "--size tiny --steps 400" in hint
    assert TunedFor.of(command).differences(TunedFor.of(typed)) == []  # run finds no other command to warn of
    old = ["python", "-m", "torchboost.workloads.vision"]  # the twin: what it printed before
    assert TunedFor.of(command).differences(TunedFor.of(old)) != []


def test_tunes_exit_status_says_whether_it_proved_a_win():
    assert exit_status({"status": "tuned"}) == 0
    assert exit_status({"status": "unchanged"}) == NO_PROVEN_WIN == 3
    assert exit_status({"status": "unverified"}) == UNVERIFIED == 4
    assert exit_status({"status": "failed"}) == 1


@pytest.mark.slow
def test_tune_json_prints_the_report_and_exits_as_documented(tmp_path):
    done = subprocess.run([sys.executable, "-m", "torchboost.cli", "tune", "--json", "--budget", "20",
                           "--steps-per-trial", "4", "--warmup", "2", "--out", str(tmp_path / "out"), "--",
                           "python", str(SCRIPTS / "tune_tiny.py"), "--steps", "200"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)  # nothing else on stdout: the tables went to stderr
    assert report["kind"] == "tune" and report == json.loads((tmp_path / "out" / "report.json").read_text())
    assert done.returncode == exit_status(report), done.stderr[-2000:]
