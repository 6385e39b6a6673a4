"""What the check could not confirm for lack of time is written apart, with the command that verifies it."""

from __future__ import annotations

import shlex

import pytest

from torchboost.config import BoostConfig, Overlay
from torchboost.diagnose import Facts, StepRecord
from torchboost.report.tune_report import build_tune_report
from torchboost.tune import ending, tuner
from torchboost.tune.report_data import tune_summary
from torchboost.tune.search import Decision, TuneOutcome, WaterfallStep
from torchboost.tune.trials.trial_result import TrialResult
from torchboost.tune.unverified import UNVERIFIED_NAME, check_unfinished, compare_command
from torchboost.tune.verify.end_to_end import EndToEnd

USERS_OWN = '[precision]\nmode = "fp32"\n'


def _outcome() -> TuneOutcome:
    """A busy 4 s-step baseline; one thread kept at 0.259 of its step in bursts."""
    baseline = TrialResult(settings=Overlay(), step_ms=[4069.0] * 12, wall_s=80.0, fixed_s=6.0, samples_per_step=8)
    kept = Decision("host", Overlay({"cpu.threads": 1}), "kept",
                    "median ratio 0.259 ± 0.017 over 6 pairs of alternating bursts in one run", ratio=0.259,
                    in_bursts=True)
    waterfall = [WaterfallStep("baseline", Overlay(), 4069.0, 1.0, 0.0),
                 WaterfallStep("+ threads", Overlay({"cpu.threads": 1}), 1054.0, 3.86, 0.0)]
    return TuneOutcome(baseline, Overlay({"cpu.threads": 1}), waterfall, [kept], trials_run=3, elapsed_s=150.0,
                       spent_s={"bursts": 70.0, "trials": 80.0}, burst_trials=1)


def _tune(tmp_path, monkeypatch, e2e: EndToEnd | None, *, users_file: bool):
    monkeypatch.setattr(tuner, "run_search", lambda *a, **k: _outcome())
    monkeypatch.setattr(ending, "verify", lambda *a, **k: e2e)
    (tmp_path / "train.py").write_text("print('train')\n")
    config = tmp_path / "torchboost.toml"
    if users_file:
        config.write_text(USERS_OWN)
    options = tuner.TuneOptions(out_dir=tmp_path / "out", config_path=config, budget_s=300.0, run_steps=2000,
                                steps_per_trial=12, verify_budget_s=10.0 if e2e is None else None)  # None: no pair fits
    facts = Facts(env={"device": "cpu", "cpu_cores": 2}, steps=[StepRecord(i, 4069.0) for i in range(6)])
    return tuner.tune_script(["python", str(tmp_path / "train.py"), "--max-steps", "2000"], options, facts=facts)


NO_PAIR = EndToEnd(baseline_runs_s=[80.0], steps=17, planned_steps=2000, out_of_time=True)
TWO_PAIRS = EndToEnd(baseline_runs_s=[80.0, 82.0], tuned_runs_s=[30.0, 31.0], steps=17)
FOUR_PAIRS = EndToEnd(baseline_runs_s=[80.0, 82.0, 81.0, 80.0], tuned_runs_s=[30.0, 31.0, 30.0, 30.5], steps=17)


@pytest.mark.parametrize("e2e, users_file", [(NO_PAIR, True), (TWO_PAIRS, False), (None, True)])
def test_an_unfinished_check_writes_the_measured_configuration_apart(tmp_path, monkeypatch, e2e, users_file):
    """No pair finished, two pairs (fewer than a claim), or no time for the check at all: the
    search's pick goes to torchboost.unverified.toml with what was measured and the compare
    command that verifies it; the user's torchboost.toml is as it was (absent stays absent)."""
    run = _tune(tmp_path, monkeypatch, e2e, users_file=users_file)
    config, apart = tmp_path / "torchboost.toml", tmp_path / UNVERIFIED_NAME
    assert (config.read_text() == USERS_OWN) if users_file else not config.exists()
    assert BoostConfig.from_toml(apart).cpu.threads == 1 and run.unverified is not None
    assert run.verdict.startswith("not verified end to end") and "3.86x a step" in run.verdict
    assert "6 pairs of alternating bursts" in run.verdict and UNVERIFIED_NAME in run.verdict
    command = list(run.unverified.command)
    assert command[:3] == ["torchboost", "compare", "--config"]
    assert command[3] == (str(config) if users_file else "none") and command[5] == str(apart)
    assert command[command.index("--") + 1:] == ["python", str(tmp_path / "train.py"), "--max-steps", "2000"]
    # four pairs of whole 2000-step runs at 4.07 s and 1.05 s a step, start-up and the loss runs included
    assert run.unverified.expected_s == pytest.approx(4 * (12.0 + 2000 * 5.123) + 12.0 + 30 * 5.123)
    assert "--budget" in command and shlex.join(command) in run.verdict
    assert run.config == (BoostConfig.from_toml(config) if users_file else BoostConfig.off())


@pytest.mark.parametrize("e2e", [FOUR_PAIRS, EndToEnd(baseline_runs_s=[80.0, 82.0], tuned_runs_s=[90.0, 95.0],
                                                      steps=17)])
def test_twin_a_finished_or_refuting_check_writes_nothing_apart(tmp_path, monkeypatch, e2e):
    """Four pairs verify it (torchboost.toml holds it); two pairs that measured it slower drop
    it. Either way no torchboost.unverified.toml."""
    run = _tune(tmp_path, monkeypatch, e2e, users_file=False)
    assert run.unverified is None and not (tmp_path / UNVERIFIED_NAME).exists()
    # verified: torchboost.toml holds it; refuted: nothing to change, no file made
    assert (tmp_path / "torchboost.toml").is_file() is (e2e is FOUR_PAIRS) is run.written
    if e2e is FOUR_PAIRS:
        assert BoostConfig.from_toml(tmp_path / "torchboost.toml").cpu.threads == 1


def test_the_report_says_how_the_budget_went(tmp_path, monkeypatch):
    run = _tune(tmp_path, monkeypatch, NO_PAIR, users_file=False)
    report = build_tune_report(tune_summary(run, config_path=tmp_path / "torchboost.toml"))
    assert report["unverified"]["path"].endswith(UNVERIFIED_NAME)
    assert set(report["spent_s"]) == {"diagnosis", "bursts", "trials", "check", "total"}
    assert report["status"] == "unverified"
    line = report["notes"][-1]
    assert line.startswith("How the time went: the diagnosis ") and "1 burst trial(s) 70 s" in line
    assert "2 other trial(s) 80 s" in line and line.endswith("for --budget 300 s.")


def test_check_unfinished_only_for_lack_of_time():
    assert check_unfinished(None, 0.03) and check_unfinished(NO_PAIR, 0.03) and check_unfinished(TWO_PAIRS, 0.03)
    assert not check_unfinished(FOUR_PAIRS, 0.03)
    assert not check_unfinished(EndToEnd(baseline_runs_s=[80.0], tuned_runs_s=[79.0]), 0.03)  # measured no faster
    assert not check_unfinished(EndToEnd(error="the tuned configuration failed"), 0.03)
    assert not check_unfinished(TWO_PAIRS, 0.03, asked_pairs=2)  # --verify-pairs 2: what was asked ran


def test_the_compare_command_keeps_its_default_budget_where_the_runs_fit_it(tmp_path):
    words = compare_command(["python", "train.py"], tmp_path / "torchboost.toml", tmp_path / UNVERIFIED_NAME,
                            expected_s=600.0)
    assert "--budget" not in words and words[3] == "none"


def test_the_terminal_names_the_file_apart_and_how_to_use_it_once_verified(tmp_path, monkeypatch):
    """The unverified file, its compare command and its run command are printed; not the
    'nothing changed' hint of a tune that measured nothing. A switch whose own run did not
    fit is said unconfirmed, not rejected."""
    import io

    from rich.console import Console

    from torchboost.report._tune_text import verdict
    from torchboost.report.tune_report import print_tune_report

    run = _tune(tmp_path, monkeypatch, NO_PAIR, users_file=False)
    buf = io.StringIO()
    print_tune_report(tune_summary(run, config_path=tmp_path / "torchboost.toml"),
                      Console(file=buf, width=400, color_system=None), {})
    text = buf.getvalue()
    assert f"{UNVERIFIED_NAME}: {tmp_path / UNVERIFIED_NAME}" in text
    assert "verify it: torchboost tune --resume --budget" in text and "or with whole runs: torchboost compare" in text
    assert f"use it once verified: torchboost run --config {tmp_path / UNVERIFIED_NAME} -- python" in text
    assert "nothing changed: run your script" not in text
    unconfirmed = {"subject": "bf16", "status": "unconfirmed", "ratio": 0.441, "reason": "..."}
    assert verdict(unconfirmed).endswith("the budget ran out before it was confirmed: not kept")


def test_tune_again_gives_the_check_the_pairs_a_claim_rests_on(tmp_path, monkeypatch):
    """The printed ``tune --resume`` command: this tune's options again, and a --budget whose
    check time holds four pairs as the check itself plans them. Twin: the --budget given,
    300 s, held fewer (why the check did not finish)."""
    from torchboost.tune.verify import plan_verification

    run = _tune(tmp_path, monkeypatch, NO_PAIR, users_file=False)
    again = list(run.unverified.tune_again)
    assert again[:4] == ["torchboost", "tune", "--resume", "--budget"]
    budget = float(again[4])
    for flag, value in (("--out", str(tmp_path / "out")), ("--config", str(tmp_path / "torchboost.toml")),
                        ("--run-steps", "2000"), ("--steps-per-trial", "12")):
        assert again[again.index(flag) + 1] == value
    assert "--warmup" not in again  # left at its default
    assert again[again.index("--") + 1:] == ["python", str(tmp_path / "train.py"), "--max-steps", "2000"]
    assert run.unverified.tune_again_s == budget * 1.5 and shlex.join(again) in run.verdict

    def pairs(budget_s: float) -> int:
        options = tuner.TuneOptions(budget_s=budget_s, steps_per_trial=12)
        return plan_verification(pairs=4, budget_s=ending.check_most_s(options), step_ms=1054.0, fixed_s=6.0,
                                 trial_steps=12, warmup=5, whole_run_s=6.0 + 2000 * 4.069, planned_steps=2000,
                                 baseline_ms=4069.0).pairs

    assert pairs(budget) == 4 and pairs(300.0) < 4
