"""Debug switches left on: the facts read from the live process, one finding per switch (each
with a twin that does not fire), anomaly detection's quick switch, setting, Booster, no-code
twin and lever; end to end, the doctor measures it and `torchboost run` turns it off."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn

import torchboost
from torchboost.config import BoostConfig, ConfigError, Overlay
from torchboost.diagnose.rules import RULES
from torchboost.evidence.findings import Measured
from torchboost.evidence.observed import Facts, StepRecord
from torchboost.frameworks import spell
from torchboost.nocode import Applier
from torchboost.plan import Plan, nocode_settings
from torchboost.techniques.debug import DebugConfig, DebugFacts, quick_switch
from torchboost.techniques.debug.debug_facts import LINE_PATTERNS, probe_debug, script_line
from torchboost.techniques.registry import Parity, ProbeContext, TuneContext, techniques

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
CTX = ProbeContext(model=None, optimizer=None, loader=None, device="cpu")


@pytest.fixture
def anomaly():
    """Anomaly detection as it was, put back after the test."""
    before = torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()
    yield
    torch.set_anomaly_enabled(*before)


def _facts(device: str = "cpu", **seen) -> Facts:
    steps = [StepRecord(i, 18.0, 0.5, 8.0, 8.5, 1.0) for i in range(6)]
    return Facts(env={"device": device, "cpu_cores": 2}, steps=steps, techniques={"debug": DebugFacts(**seen)})


# -- one finding per switch, and its twin --------------------------------------------------

SWITCHES = [
    # (finding id, facts with the switch on, its twin: the same run without it, or off the GPU)
    ("debug.anomaly", _facts(anomaly=True), _facts(anomaly=False, anomaly_check_nan=True)),
    ("debug.profiler", _facts(profiler="kineto"), _facts(profiler="")),
    ("debug.tracer", _facts(tracer="coverage.CTracer"), _facts(tracer="")),
    ("debug.launch_blocking", _facts("cuda", launch_blocking=True), _facts("cpu", launch_blocking=True)),
    ("debug.deterministic", _facts("cuda", deterministic=True), _facts("cpu", deterministic=True)),
    ("debug.deterministic", _facts("cuda", cudnn_deterministic=True), _facts("cuda")),
    ("debug.cpp_stacktraces", _facts(cpp_stacktraces=True), _facts(cpp_stacktraces=False)),
    ("debug.dev_mode", _facts(dev_mode="PYTHONDEVMODE"), _facts(dev_mode="")),
    ("debug.torch_logs", _facts(torch_logs="TORCH_LOGS=+dynamo"), _facts(torch_logs="")),
]


@pytest.mark.parametrize("finding_id, on, off", SWITCHES, ids=[f"{s[0]}-{i}" for i, s in enumerate(SWITCHES)])
def test_each_switch_on_is_named_and_its_twin_is_not(finding_id, on, off):
    finding = RULES[finding_id](on)
    assert finding is not None and finding.id == finding_id and finding.advice
    assert RULES[finding_id](off) is None


def test_none_fires_on_a_run_with_every_switch_off():
    assert [fid for fid, rule in RULES.items() if fid.startswith("debug.") and rule(_facts("cuda"))] == []


def test_the_advice_names_the_script_s_own_line_and_invents_no_figure():
    line = "train.py line 3: torch.autograd.set_detect_anomaly(True)"
    finding = RULES["debug.anomaly"](_facts(anomaly=True, anomaly_check_nan=True, lines={"anomaly": line}))
    assert finding.advice.startswith("remove torch.autograd.set_detect_anomaly(True) (train.py line 3) or guard it")
    assert "if args.debug:" in finding.advice_code and finding.evidence["check_nan"] == "true"
    assert finding.fix == Overlay.of(DebugConfig, detect_anomaly=False)
    assert finding.expected_speedup == 1.0 and finding.formula.startswith("not estimated")
    unset = RULES["debug.launch_blocking"](_facts("cuda", launch_blocking=True))
    assert not unset.fix and "unset CUDA_LAUNCH_BLOCKING" in unset.advice  # no key: the shell's to change


# -- the facts, read from the live process ---------------------------------------------------

def test_anomaly_detection_and_its_check_nan_are_read(anomaly):
    torch.autograd.set_detect_anomaly(True, check_nan=False)
    assert (probe_debug(CTX).anomaly, probe_debug(CTX).anomaly_check_nan) == (True, False)
    torch.autograd.set_detect_anomaly(False)
    assert probe_debug(CTX).anomaly is False


def test_a_profiler_left_running_is_read_and_none_outside_it():
    with torch.autograd.profiler.profile():
        assert probe_debug(CTX).profiler == "kineto"
    assert probe_debug(CTX).profiler == ""


def test_a_trace_function_is_named():
    if sys.gettrace() is not None:
        pytest.skip("the tests run under a tracer already")

    def tracer(frame, event, arg):
        return None

    sys.settrace(tracer)
    try:
        seen = probe_debug(CTX).tracer
    finally:
        sys.settrace(None)
    assert seen.endswith("test_a_trace_function_is_named.<locals>.tracer")
    assert probe_debug(CTX).tracer == ""


def test_torch_s_environment_switches_are_read_as_torch_reads_them(monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    monkeypatch.setenv("TORCH_SHOW_CPP_STACKTRACES", "1")
    seen = probe_debug(CTX)
    assert seen.launch_blocking and seen.cpp_stacktraces
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")  # torch takes "1" alone as on
    monkeypatch.delenv("TORCH_SHOW_CPP_STACKTRACES")
    seen = probe_debug(CTX)
    assert not seen.launch_blocking and not seen.cpp_stacktraces


def test_deterministic_switches_are_read():
    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic
    try:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        seen = probe_debug(CTX)
        assert seen.deterministic and seen.cudnn_deterministic
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.backends.cudnn.deterministic = before[1]
    seen = probe_debug(CTX)
    assert (seen.deterministic, seen.cudnn_deterministic) == before


def test_dev_mode_is_read_with_how_it_was_turned_on(monkeypatch):
    assert probe_debug(CTX).dev_mode == ("" if not sys.flags.dev_mode else probe_debug(CTX).dev_mode)
    monkeypatch.setattr(sys, "flags", types.SimpleNamespace(dev_mode=True))
    monkeypatch.setattr(sys, "_xoptions", {"dev": True})
    assert probe_debug(CTX).dev_mode == "-X dev"
    monkeypatch.setattr(sys, "_xoptions", {})
    assert probe_debug(CTX).dev_mode == "PYTHONDEVMODE"


def test_torch_logs_from_the_environment_or_set_in_code(monkeypatch):
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    assert probe_debug(CTX).torch_logs == ""
    monkeypatch.setenv("TORCH_LOGS", "+dynamo")
    assert probe_debug(CTX).torch_logs == "TORCH_LOGS=+dynamo"
    monkeypatch.delenv("TORCH_LOGS")
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.DEBUG)  # what torch._logging.set_logs(dynamo=logging.DEBUG) does
    try:
        assert probe_debug(CTX).torch_logs == "torch._dynamo below WARNING"
    finally:
        logger.setLevel(level)


def test_the_line_that_turned_it_on_is_found_in_the_script_and_a_comment_or_its_off_is_not(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\n# torch.autograd.set_detect_anomaly(True)\ntorch.autograd.set_detect_anomaly(False)\n"
                      "torch.autograd.set_detect_anomaly(True)  # looking for a NaN\n")
    assert script_line(LINE_PATTERNS["anomaly"], iter([str(script)])) == (
        "train.py line 4: torch.autograd.set_detect_anomaly(True)")
    script.write_text("import torch\ntorch.autograd.set_detect_anomaly(False)\n# torch.autograd.detect_anomaly()\n")
    assert script_line(LINE_PATTERNS["anomaly"], iter([str(script)])) == ""


# -- anomaly detection: the switch, the setting, the Booster, run, tune -----------------------

def _train(switched: set[int], steps: int = 4) -> torch.Tensor:
    """An MLP trained with anomaly detection on, the quick switch on at the steps in ``switched``."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.autograd.set_detect_anomaly(True)
    switch = quick_switch(CTX)
    for i in range(steps):
        if i in switched:
            switch.on()
        nn.functional.mse_loss(model(torch.ones(4, 8) * i), torch.ones(4, 1)).backward()
        opt.step()
        opt.zero_grad()
        if i in switched:
            switch.off()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_the_switch_changes_no_maths(anomaly):
    assert torch.equal(_train(switched={0, 2, 3}), _train(switched=set()))  # Parity.EXACT


def _nan_backward() -> None:
    x = torch.zeros(2, requires_grad=True)
    torch.sqrt(x - 1.0).sum().backward()  # sqrt of -1: NaN in the backward


def test_the_switch_turns_it_off_and_puts_back_the_script_s_check_nan(anomaly):
    torch.autograd.set_detect_anomaly(True, check_nan=True)
    switch = quick_switch(CTX)
    switch.on()
    assert not torch.is_anomaly_enabled()
    _nan_backward()  # off: nothing checks the NaN
    switch.off()
    assert torch.is_anomaly_enabled() and torch.is_anomaly_check_nan_enabled()
    with pytest.raises(RuntimeError, match="nan"), pytest.warns(UserWarning, match="Error detected"):
        _nan_backward()  # twin: on again, the NaN is caught (and its forward's traceback shown)
    assert switch.setting == {"debug.detect_anomaly": False}


def test_no_switch_when_anomaly_detection_is_off(anomaly):
    torch.autograd.set_detect_anomaly(False)
    assert quick_switch(CTX) is None


def test_the_setting_takes_false_and_keep_and_refuses_true_saying_what_to_do():
    assert DebugConfig(detect_anomaly=False).detect_anomaly is False
    assert DebugConfig.off().detect_anomaly == "keep"
    with pytest.raises(ConfigError, match=r"debug.detect_anomaly: true is not a setting.*set_detect_anomaly\(True\)"):
        DebugConfig(detect_anomaly=True)


def _prepare(config: BoostConfig) -> torchboost.Booster:
    booster = torchboost.Booster(config, device="cpu", verbose=False)
    model = nn.Linear(2, 2)
    booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    return booster


def test_the_booster_turns_it_off_only_when_the_file_says_so(anomaly):
    torch.autograd.set_detect_anomaly(True)  # the script's own set-up
    booster = _prepare(BoostConfig())
    assert torch.is_anomaly_enabled()  # auto: as the script set it
    assert "leaves anomaly detection as the script set it" in booster.resolved.reasons["debug.detect_anomaly"]
    _prepare(BoostConfig.off().replace(debug={"detect_anomaly": False}))
    assert not torch.is_anomaly_enabled()


def _script_steps(applier: Applier) -> bool:
    """A script that turns anomaly detection on in its set-up, after the applier is installed,
    and takes two steps; whether it was on at its second."""
    torch.autograd.set_detect_anomaly(True)
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for _ in range(2):
        seen.append(torch.is_anomaly_enabled())
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
    applier.uninstall()
    return seen[-1]


def test_run_turns_it_off_at_the_first_step_and_says_so_and_leaves_it_unasked(anomaly):
    settings, notes = nocode_settings(Overlay.of(DebugConfig, detect_anomaly=False))
    assert notes == [] and dict(settings) == {"debug.detect_anomaly": False}
    applier = Applier(Plan.applying(settings)).install()
    assert _script_steps(applier) is False
    assert applier.notes == ["autograd's anomaly detection turned off (the script had it on)"]
    assert _script_steps(Applier(Plan.applying({})).install()) is True  # twin: nothing asked, nothing changed


def test_the_lever_is_exact_proposed_when_it_was_seen_on_and_confirmed_in_bursts():
    technique = next(t for t in techniques() if t.name == "debug")
    lever, = technique.levers
    off = Overlay.of(DebugConfig, detect_anomaly=False)
    assert lever.parity is Parity.EXACT and lever.finding_ids == ("debug.anomaly",)
    assert lever.propose({}, TuneContext(techniques={"debug": DebugFacts(anomaly=True)})) == [off]
    assert lever.propose({}, TuneContext(techniques={"debug": DebugFacts(anomaly=False)})) == []
    assert lever.switches(off) and not lever.switches(Overlay())
    assert spell(off).torch_code == ("torch.autograd.set_detect_anomaly(False)  # after the script's own set-up",)


def _anomaly_measured(plain_ms: list[float], switched_ms: list[float]):
    """The doctor's findings on a run with anomaly detection on whose quick probe timed
    ``plain_ms`` against ``switched_ms`` (the end-to-end test below, its two outcomes made here)."""
    from torchboost.diagnose import diagnose
    from torchboost.evidence.observed import QuickProbeFacts

    facts = _facts(anomaly=True, anomaly_check_nan=True)
    facts.quick_probes = [QuickProbeFacts("debug.anomaly", "anomaly detection off", plain_ms=plain_ms,
                                          switched_ms=switched_ms, warmup_ms=1.0)]
    findings = diagnose(facts)
    return findings, next(f for f in findings if f.id == "debug.anomaly")


def test_anomaly_detection_measured_faster_in_every_pair_ranks_first():
    findings, anomaly = _anomaly_measured([40.0, 42.0, 41.0], [18.0, 19.0, 18.5])
    assert anomaly.measured.agree and anomaly.measured.ratio > 1.0
    assert findings[0].id == "debug.anomaly", [(f.id, f.measured) for f in findings]


def test_twin_anomaly_pairs_that_disagree_say_no_measurement_either_way():
    # another process slowed two plain steps many times over: one pair reads slower, two faster
    findings, anomaly = _anomaly_measured([40.0, 400.0, 15.0], [18.0, 19.0, 30.0])
    assert not anomaly.measured.agree
    assert any("no measurement either way" in note for note in anomaly.notes)


# -- end to end: the doctor measures it first, run turns it off --------------------------------

@pytest.mark.slow
def test_the_doctor_ranks_anomaly_detection_first_measured(tmp_path):
    argv = [sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "8", "--warmup", "3", "--out",
            str(tmp_path / "report"), "--json", "--", "python", str(SCRIPTS / "debug_anomaly.py")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    anomaly = next(f for f in findings if f["id"] == "debug.anomaly")
    assert anomaly["evidence"]["line"] == "torch.autograd.set_detect_anomaly(True) (debug_anomaly.py line 12)"
    assert "debug.profiler" not in {f["id"] for f in findings}  # the doctor's own window is not the script's
    assert anomaly["measured"] is not None, anomaly["notes"]  # its quick probe ran
    if Measured(**anomaly["measured"]).agree:
        assert findings[0]["id"] == "debug.anomaly", [(f["id"], f["measured"]) for f in findings]
        assert anomaly["measured"]["ratio"] > 1.0
    else:  # a machine so busy that another process slowed some steps many times over: said so
        assert any("no measurement either way" in note for note in anomaly["notes"])


@pytest.mark.slow
def test_run_turns_anomaly_detection_off_after_the_script_s_set_up(tmp_path):
    BoostConfig.off().replace(debug={"detect_anomaly": False}).to_toml(tmp_path / "torchboost.toml")
    argv = [sys.executable, "-m", "torchboost.cli", "run", "--", "python", str(SCRIPTS / "debug_anomaly.py"),
            "--steps", "4"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "anomaly detection at step 3: False" in proc.stdout
    assert "anomaly detection turned off (the script had it on)" in proc.stderr
    plain = tmp_path / "plain"
    plain.mkdir()
    BoostConfig.off().to_toml(plain / "torchboost.toml")  # twin: a file that does not ask
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=plain)
    assert "anomaly detection at step 3: True" in proc.stdout, proc.stderr
