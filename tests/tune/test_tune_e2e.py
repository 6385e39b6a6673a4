"""`torchboost tune` end to end on tiny scripts: kill and resume, a diverging candidate, compile amortised."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchboost.cli.tune import NO_PROVEN_WIN, UNVERIFIED

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
TRIAL = ["--steps-per-trial", "4", "--warmup", "2"]


def _tune(tmp_path: Path, script: str, *extra: str, **kwargs) -> subprocess.Popen | subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "torchboost.cli", "tune", "--out", str(tmp_path / "out"),
            "--config", str(tmp_path / "torchboost.toml"), *TRIAL, *extra, "--", "python", str(SCRIPTS / script)]
    if kwargs.pop("background", False):
        return subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)


def _finished(done: subprocess.CompletedProcess, tmp_path: Path) -> None:
    """tune ran to its end: its exit status is the one its report's status documents
    (0 a change written, 3 no proven win, 4 measured but not verified within --budget)."""
    status = json.loads((tmp_path / "out" / "report.json").read_text())["status"] if done.returncode in (0, 3, 4) else None
    assert (done.returncode, status) in ((0, "tuned"), (NO_PROVEN_WIN, "unchanged"), (UNVERIFIED, "unverified")), (
        done.stderr[-3000:])


def _journal(tmp_path: Path) -> list[dict]:
    path = tmp_path / "out" / "journal.jsonl"
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in entries if "identity" not in e]  # the header names what was measured


def _checked(tmp_path: Path) -> str | None:
    """The end-to-end check's journal; None when the search kept nothing to check."""
    path = tmp_path / "out" / "verify.jsonl"
    return path.read_text() if path.exists() else None


def _keys(entries: list[dict]) -> list[str]:
    """Each trial's identity: its settings, its repeat, and the change a burst trial alternated."""
    return [json.dumps([e["settings"], e["repeat"], e.get("bursts") or {}], sort_keys=True) for e in entries]


RESUMED = ("--run-steps", "20", "--verify-pairs", "1")
"""One end-to-end pair: the replay still shows the check's runs reused, in a third of its time."""


@pytest.mark.slow
def test_killed_tune_resumes_without_rerunning_finished_trials(tmp_path):
    proc = _tune(tmp_path, "tune_tiny.py", *RESUMED, background=True)
    try:
        deadline = time.monotonic() + 300
        while len(_journal(tmp_path)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, "tune finished before it could be killed"
        os.killpg(proc.pid, signal.SIGKILL)  # tune and the trial in flight
    finally:
        proc.wait(timeout=30)
    before = _journal(tmp_path)
    assert len(before) >= 2

    resumed = _tune(tmp_path, "tune_tiny.py", *RESUMED, "--resume")
    _finished(resumed, tmp_path)
    after = _journal(tmp_path)
    assert len(set(_keys(after))) == len(after), "a finished trial ran twice"
    assert _keys(after)[: len(before)] == _keys(before)
    outcome = json.loads((tmp_path / "out" / "outcome.json").read_text())
    assert outcome["reused_trials"] == len(before)
    assert outcome["trials_run"] == len(after)
    written = tmp_path / "torchboost.toml"  # none where nothing was kept
    resumed_toml = written.read_text() if written.is_file() else None
    checked = _checked(tmp_path)

    # An uninterrupted run over the same (now complete) journal picks the same winner
    # without running anything.
    written.unlink(missing_ok=True)
    replay = _tune(tmp_path, "tune_tiny.py", *RESUMED, "--resume")
    _finished(replay, tmp_path)
    assert _journal(tmp_path) == after
    assert _checked(tmp_path) == checked  # nor the end-to-end check's runs, where it ran
    assert (written.read_text() if written.is_file() else None) == resumed_toml
    assert json.loads((tmp_path / "out" / "outcome.json").read_text())["reused_trials"] == len(after)


def _overflow_losses(bf16: bool, steps: int = 20) -> list[float]:
    """tune_bf16_overflow.py's model trained ``steps`` steps here, in fp32 or under bf16
    autocast, as its trial would: under bf16 its loss is inf from the first step."""
    import runpy

    import torch

    torch.manual_seed(0)
    script = runpy.run_path(str(SCRIPTS / "tune_bf16_overflow.py"), run_name="overflow")  # 1000 fp32 steps, ~0.1 s
    model, x = script["Overflowing"](), script["x"]
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    losses = []
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = -model(x).mean()
        losses.append(float(loss.detach()))
        loss.float().backward()
        optimizer.step()
        optimizer.zero_grad()
    return losses


def _search_with_probe(cpu_bf16_speedup: float):
    """tune's search over the overflow script's real losses, bf16 twice as fast, with the bf16
    matmul probe's result forced: the end-to-end test below's two outcomes, on any CPU."""
    from torchboost.techniques.compile import CompileTuning
    from torchboost.techniques.precision import PrecisionTuning
    from torchboost.tune.search import SearchOptions, run_search
    from torchboost.tune.search.levers import TuneContext, default_levers
    from torchboost.tune.trials.trial_result import TrialResult

    losses = {False: _overflow_losses(False), True: _overflow_losses(True)}
    measured = []

    def measure(settings, repeat, **_):
        bf16 = settings.get("precision.mode") == "bf16"
        measured.append(dict(settings))
        return TrialResult(settings=dict(settings), repeat=repeat, step_ms=[5.0 if bf16 else 10.0] * 5,
                           losses=losses[bf16], samples_per_step=64)

    ctx = TuneContext(device="cpu", cpu_cores=2, tuning=(PrecisionTuning(cpu_bf16_speedup=cpu_bf16_speedup),
                                                          CompileTuning(can_compile=False)))
    outcome = run_search(default_levers(), ctx, measure, SearchOptions(run_steps=50))
    return outcome, next(d for d in outcome.decisions if d.lever == "precision"), measured


def test_bf16_on_a_cpu_whose_probe_reads_it_faster_is_tried_and_rejected_as_incorrect():
    outcome, bf16, measured = _search_with_probe(2.0)
    assert any(s.get("precision.mode") == "bf16" for s in measured)
    assert bf16.status == "incorrect" and "inf" in bf16.reason and "step" in bf16.reason, bf16.reason
    assert outcome.settings.get("precision.mode") != "bf16"


def test_twin_bf16_on_a_cpu_whose_probe_reads_it_far_slower_is_skipped_untried():
    outcome, bf16, measured = _search_with_probe(0.2)
    assert not any(s.get("precision.mode") == "bf16" for s in measured)
    assert bf16.status == "skipped" and "bf16 matmul probe ran at 0.20x" in bf16.reason
    assert "cannot be faster here" in bf16.reason and outcome.settings.get("precision.mode") != "bf16"


@pytest.mark.slow
def test_diverging_candidate_is_rejected_and_compile_waits_for_its_break_even(tmp_path):
    done = _tune(tmp_path, "tune_bf16_overflow.py", "--run-steps", "50")
    _finished(done, tmp_path)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    bf16 = next(d for d in report["decisions"] if d["settings"].get("precision.mode") == "bf16")
    # which of the two this CPU gives turns on its bf16 probe: each is made on any CPU above
    if bf16["status"] == "skipped":  # a CPU whose bf16 the probe measured far slower: never tried
        assert "bf16 matmul probe ran at" in bf16["reason"] and "cannot be faster here" in bf16["reason"]
    else:
        assert bf16["status"] == "incorrect"
        assert "inf" in bf16["reason"] and "step" in bf16["reason"]
    assert report["settings"].get("precision.mode") != "bf16"
    compile_ = next(d for d in report["decisions"] if d["settings"].get("compile.mode"))
    assert compile_["status"] in ("skipped", "rejected")
    assert compile_["break_even_steps"] and compile_["break_even_steps"] > 50
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "break-even" in markdown and "incorrect" in markdown
    assert "compile.mode" not in report["settings"]  # compile stays off
    written = tmp_path / "torchboost.toml"  # none where nothing was kept: the folder as it was
    assert written.is_file() is bool(report["settings"]) and report["config"]["state"] in ("written", "not written")
    if written.is_file():
        assert 'mode = "off"' in written.read_text()


@pytest.mark.slow
def test_the_users_own_settings_survive_tune(tmp_path):
    """An [accumulation] steps = 4 file: the trials train with it, the written file keeps it,
    the previous file is kept, and the script then takes as many optimizer steps as before."""
    from torchboost import BoostConfig

    own = BoostConfig().replace(accumulation={"steps": 4}, compile={"mode": "off"})
    own.to_toml(tmp_path / "torchboost.toml")
    before_text = (tmp_path / "torchboost.toml").read_text()

    def optimizer_steps() -> dict:
        done = subprocess.run([sys.executable, str(SCRIPTS / "booster_accum.py")], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    before = optimizer_steps()
    assert before == {"optimizer_steps": 16, "accumulation_steps": 4}  # 2 epochs x 32 batches / 4
    tuned = _tune(tmp_path, "booster_accum.py", "--budget", "20", "--run-steps", "60")
    _finished(tuned, tmp_path)
    assert BoostConfig.from_toml(tmp_path / "torchboost.toml").accumulation.steps == 4
    # The user's file is kept: as .bak when a change was written, else untouched in place.
    bak = tmp_path / "torchboost.toml.bak"
    assert (bak if bak.exists() else tmp_path / "torchboost.toml").read_text() == before_text
    assert optimizer_steps() == before
