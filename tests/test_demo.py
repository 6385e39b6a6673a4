"""`torchboost demo`, the README's main command, end to end on a short budget (its doctor counts in it)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_diagnoses_tunes_and_writes_its_config(tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "torchboost.cli", "demo", "--out", str(out), "--budget", "60",
         "--steps-per-trial", "4", "--warmup", "2"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1. doctor" in done.stdout and "2. tune" in done.stdout and "Before:" in done.stdout
    # verified: torchboost.toml; a check the 60 s budget could not finish (a loaded machine):
    # the pick written apart; no proven win: nothing written. The closing line says which.
    said = " ".join(done.stdout.split()) + " "
    written = [out / name for name in ("torchboost.toml", "torchboost.unverified.toml") if (out / name).is_file()]
    if written:
        assert f"Apply it to the unmodified script: torchboost run --config {written[0]} -- " in said
    else:
        assert "Nothing to apply: no change was proven faster here" in said and "torchboost run --config" not in said
    for report in ("doctor/report.json", "doctor/report.html", "tune/report.json", "tune/journal.jsonl"):
        assert (out / report).is_file(), report


def test_demo_refuses_a_command(capsys):
    from torchboost.cli import main

    assert main(["demo", "--", "python", "train.py"]) == 2
    assert "takes no command" in capsys.readouterr().err


def _demo_closing(tmp_path, monkeypatch, capsys, *, written: bool, unverified: bool) -> str:
    """``torchboost demo`` with the doctor's run and the tune handed in (no process): its closing
    words for a tune that wrote the file, wrote it apart unverified, or kept nothing. The
    end-to-end test above gets one of the three, as the machine's load has it."""
    import argparse
    import types

    from torchboost.cli import demo
    from torchboost.evidence.observed import Facts, StepRecord

    facts = Facts(env={"device": "cpu", "cpu_cores": 2}, steps=[StepRecord(i, 18.0, 0.5, 8.0, 8.5, 1.0)
                                                                  for i in range(4)])
    monkeypatch.setattr(demo, "run_observed", lambda request: types.SimpleNamespace(facts=facts, exit_code=0))
    apart = tmp_path / "demo" / "torchboost.unverified.toml"
    tuned = types.SimpleNamespace(outcome=types.SimpleNamespace(error=None), written=written,
                                  unverified=types.SimpleNamespace(path=apart) if unverified else None)
    monkeypatch.setattr(demo, "tune_with_progress", lambda *a, **k: tuned)
    monkeypatch.setattr(demo, "print_outcome", lambda *a, **k: None)
    args = argparse.Namespace(command=[], budget=20.0, steps_per_trial=4, warmup=2, workload="mlp",
                              out=str(tmp_path / "demo"))
    assert demo.run(args) == 0
    return " ".join(capsys.readouterr().out.split()) + " "


def test_a_demo_whose_tune_wrote_its_config_says_how_to_apply_it(tmp_path, monkeypatch, capsys):
    said = _demo_closing(tmp_path, monkeypatch, capsys, written=True, unverified=False)
    assert f"Apply it to the unmodified script: torchboost run --config {tmp_path / 'demo' / 'torchboost.toml'} -- " \
           in said and "Nothing to apply" not in said


def test_twin_a_demo_whose_tune_proved_nothing_has_nothing_to_apply(tmp_path, monkeypatch, capsys):
    said = _demo_closing(tmp_path, monkeypatch, capsys, written=False, unverified=False)
    assert "Nothing to apply: no change was proven faster here" in said and "torchboost run --config" not in said


def test_a_demo_whose_check_did_not_finish_points_at_the_file_written_apart(tmp_path, monkeypatch, capsys):
    said = _demo_closing(tmp_path, monkeypatch, capsys, written=False, unverified=True)
    assert "torchboost run --config " + str(tmp_path / "demo" / "torchboost.unverified.toml") in said
