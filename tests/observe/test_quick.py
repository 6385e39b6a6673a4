"""The quick probes in-process: each switch timed against plain steps after the profiler window."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchboost.evidence.observed import QuickProbeFacts
from torchboost.observe import Instrumentation, ObserveSpec, StepRecorder, StopObserving
from torchboost.observe.probes.quick import QUICK_PAIRS, QuickProbes
from torchboost.observe.record import facts_so_far
from torchboost.plan import Bursts
from torchboost.techniques._quick import QuickSwitch
from torchboost.techniques.registry import techniques

PROBE_STEPS = 1 + 2 * QUICK_PAIRS


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, object]:
    """What the switches touch: the model's own forward, the optimizer's flags, the backends'."""
    mkldnn = torch.backends.mkldnn
    return {"forward": model.__dict__.get("forward"),
            "groups": [{k: g.get(k) for k in ("foreach", "fused")} for g in optimizer.param_groups],
            "group_keys": [sorted(g) for g in optimizer.param_groups],
            "fp32": [getattr(getattr(mkldnn, n, None), "fp32_precision", None) for n in ("matmul", "conv")]}


def _every_switch(facts, ctx):
    """Every technique's switch that applies here, as though its finding fired."""
    return [s for s in (t.quick_probe(ctx) for t in techniques() if t.quick_probe) if s is not None], []


def _run(tmp_path, monkeypatch, *, own_autocast=False, full=False, choose=_every_switch, steps=60, spec=None,
         bursts=None):
    """A small MLP trained under the instrumentation: warm-up 1, recorded 3, profiled 2, then the
    probes (or as ``spec`` says; ``bursts``: a burst trial's switches, as its plan hands them over)."""
    monkeypatch.setattr(facts_so_far, "choose_switches", choose)
    monkeypatch.setattr(facts_so_far, "quick_budget_ms", lambda elapsed_s: 1e9)  # the budget is tested on its own
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = _state(model, optimizer)
    spec = spec or ObserveSpec(out_dir=str(tmp_path), steps=3, warmup=1, profile_warmup=1, profile_active=1, full=full)
    recorder = StepRecorder(spec, bursts=bursts)
    done = 0
    with Instrumentation(recorder):
        try:
            for _ in range(steps):
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=own_autocast):
                    loss = model(torch.randn(8, 16)).float().pow(2).mean()
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                done += 1
        except StopObserving:
            pass
    return recorder, done, before, _state(model, optimizer)


def assert_only_recorded(facts, spec_steps: int = 3, warmup: int = 1) -> None:
    """The recorded steps are the recorded ones alone: no profiled or probe step among them."""
    assert [s.index for s in facts.steps] == list(range(warmup, warmup + spec_steps))


def test_each_switch_is_timed_against_plain_steps_and_left_off(tmp_path, monkeypatch):
    recorder, done, before, after = _run(tmp_path, monkeypatch)
    facts = recorder.facts()
    labels = [p.label for p in facts.quick_probes]
    assert labels and "fused AdamW" in labels and "bf16 autocast" in labels
    for probe in facts.quick_probes:
        assert probe.error is None, probe
        assert len(probe.plain_ms) == len(probe.switched_ms) == QUICK_PAIRS and probe.warmup_ms is not None
        assert probe.ratio is not None and probe.ratio > 0 and probe.steps == 2 * QUICK_PAIRS
    # warm-up, recorded, profiled, then the probes; the last probe step's boundary stops the script
    assert done == 1 + 3 + 2 + PROBE_STEPS * len(labels) - 1
    assert_only_recorded(facts)
    assert after == before  # every switch off again: the forward, the flags, the backends as they were


def test_twin_the_statistics_check_catches_a_probe_step_among_the_recorded(tmp_path, monkeypatch):
    recorder, *_ = _run(tmp_path, monkeypatch)
    facts = recorder.facts()
    facts.steps.append(facts.steps[-1].__class__(9, 1.0, 0.0, 0.0, 0.0, 0.0))
    with pytest.raises(AssertionError):
        assert_only_recorded(facts)


def test_twin_a_switch_whose_off_leaves_it_on_is_caught(tmp_path, monkeypatch):
    def leaky(facts, ctx):
        group = ctx.optimizer.param_groups[0]
        return [QuickSwitch("optimizer.fused", "leaky", on=lambda: group.update(fused=True), off=lambda: None)], []

    *_, before, after = _run(tmp_path, monkeypatch, choose=leaky)
    assert after != before


def test_a_full_run_never_probes(tmp_path, monkeypatch):
    recorder, done, *_ = _run(tmp_path, monkeypatch, full=True, steps=20)
    assert done == 20 and recorder.facts().quick_probes == []


def test_twin_a_tune_trial_without_a_profiler_window_never_probes_either(tmp_path, monkeypatch):
    monkeypatch.setattr(facts_so_far, "choose_switches", _every_switch)
    spec = ObserveSpec(out_dir=str(tmp_path), steps=3, warmup=1, profile_warmup=0, profile_active=0)
    recorder, model = StepRecorder(spec), nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    with Instrumentation(recorder), pytest.raises(StopObserving):
        for _ in range(20):
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
            done += 1
    assert done == 1 + 3 - 1 and recorder.facts().quick_probes == []


def test_a_script_whose_own_autocast_is_on_is_not_probed_for_bf16(tmp_path, monkeypatch):
    recorder, *_ = _run(tmp_path, monkeypatch, own_autocast=True)
    labels = [p.label for p in recorder.facts().quick_probes]
    assert "fused AdamW" in labels and not any("autocast" in label for label in labels)


def test_twin_without_its_own_autocast_it_is_probed_for_bf16(tmp_path, monkeypatch):
    recorder, *_ = _run(tmp_path, monkeypatch, own_autocast=False)
    assert any("autocast" in p.label for p in recorder.facts().quick_probes)


def test_a_switch_that_makes_the_loss_nan_is_reported_and_ends_the_probes(tmp_path, monkeypatch):
    def poison(facts, ctx):
        weight = ctx.model[0].weight
        saved = []

        def on():
            saved.append(weight.detach().clone())
            with torch.no_grad():
                weight.fill_(float("nan"))

        def off():
            with torch.no_grad():
                weight.copy_(saved.pop())

        fine = QuickSwitch("optimizer.fused", "fine", on=lambda: None, off=lambda: None)
        return [QuickSwitch("precision.lower", "poison", on=on, off=off), fine], []

    recorder, done, *_ = _run(tmp_path, monkeypatch, choose=poison)
    probes = recorder.facts().quick_probes
    assert probes[0].error == "made the loss NaN or inf" and probes[0].ratio is None
    assert [p.label for p in probes] == ["poison"]  # nothing else is timed on weights that may be NaN
    assert done == 1 + 3 + 2 + 1 - 1  # its first (unmeasured) step was the one


def test_twin_a_switch_that_raises_is_reported_and_the_script_goes_on(tmp_path, monkeypatch):
    def broken(facts, ctx):
        def on():
            raise RuntimeError("no such kernel")

        fine = QuickSwitch("optimizer.fused", "fine", on=lambda: None, off=lambda: None)
        return [QuickSwitch("precision.lower", "broken", on=on, off=lambda: None), fine], []

    recorder, *_ = _run(tmp_path, monkeypatch, choose=broken)
    probes = recorder.facts().quick_probes
    assert probes[0].error.startswith("could not be switched on: RuntimeError") and probes[1].error is None
    assert probes[1].ratio is not None


# -- the runner alone, on fake switches and given step times ---------------------------------

def _fake(log: list[str], name: str = "s") -> QuickSwitch:
    return QuickSwitch(f"{name}.id", name, on=lambda: log.append("on"), off=lambda: log.append("off"))


def test_the_runner_interleaves_plain_and_switched_steps_and_takes_the_median_pair():
    log: list[str] = []
    quick = QuickProbes()
    assert quick.start([_fake(log)], budget_ms=1e9, step_ms=10.0)
    times = iter([7.0] + [10.0, 5.0] * QUICK_PAIRS)
    while quick.after_step(next(times), torch.tensor(1.0)):
        pass
    assert log == ["on"] + ["off", "on"] * QUICK_PAIRS + ["off"]
    result = quick.results[0]
    assert result.warmup_ms == 7.0 and result.ratio == pytest.approx(2.0) and result.steps == 2 * QUICK_PAIRS


@pytest.mark.parametrize("decides", [True, False])
def test_bursts_end_once_their_pairs_decide(decides):
    """One thread at 0.26 of a busy step, bursts planned for 12 pairs: decided after four
    (the fewest that may decide), and the switch left off. Twin: without a verdict to
    reach, every planned pair runs."""
    from functools import partial

    from torchboost.evidence.quick_probe import MIN_DECIDING_PAIRS, bursts_decided

    log: list[str] = []
    quick = QuickProbes()
    decided = partial(bursts_decided, min_gain=0.03) if decides else None
    assert quick.start([_fake(log)], budget_ms=float("inf"), step_ms=4000.0, pairs=12, decided=decided)
    times = iter([3000.0] + [4000.0, 1040.0, 4100.0, 1050.0, 3900.0, 1030.0] * 4)
    steps = 1
    while quick.after_step(next(times), torch.tensor(1.0)):
        steps += 1
    pairs = MIN_DECIDING_PAIRS if decides else 12
    assert steps == 1 + 2 * pairs and len(quick.results[0].switched_ms) == pairs and log[-1] == "off"
    assert quick.results[0].ratio == pytest.approx(4000.0 / 1040.0, rel=0.03)


def test_twin_a_switch_over_the_budget_is_not_run():
    log: list[str] = []
    quick = QuickProbes()
    assert not quick.start([_fake(log)], budget_ms=10.0, step_ms=10.0)
    assert log == [] and quick.results[0].error.startswith("was not run") and quick.results[0].ratio is None


def test_the_ratio_is_the_median_of_the_pairs():
    probe = QuickProbeFacts("x", "x", plain_ms=[10.0, 10.0, 30.0], switched_ms=[5.0, 10.0, 10.0])
    assert probe.ratio == pytest.approx(2.0) and probe.steps == 6


# -- end to end: the doctor's command on a built-in workload -----------------------------------

@pytest.mark.slow
def test_the_doctor_measures_the_fused_optimizer_and_full_never_probes(tmp_path):
    import json
    import subprocess
    import sys

    def doctor(out, *options):
        subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "10", "--warmup", "2",
                        "--out", str(out), "--json", *options, "--", sys.executable, "-m",
                        "torchboost.workloads.mlp", "--size", "tiny", "--steps", "60"],
                       check=True, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        return json.loads((out / "report.json").read_text())

    report = doctor(tmp_path / "bounded")
    probes = {p["finding_id"]: p for p in report["facts"]["quick_probes"]}
    assert report["facts"]["steps"][-1]["index"] == 2 + 10 - 1
    if "optimizer.fused" in probes:
        _fused_probe_is_said(probes["optimizer.fused"], report)
    else:
        # Beside other work (the test suite's own, on two cores) the optimizer's share of the
        # step fell under the rule's threshold when the child chose its probes: the machine
        # was busy then, and its threads probe says so. On a quiet machine fused is probed.
        assert "threads.contended" in probes, sorted(probes)
    full = doctor(tmp_path / "full", "--full")
    assert full["facts"]["quick_probes"] == [] and all(f.get("measured") is None for f in full["findings"])


def _fused_probe_is_said(probe: dict, report: dict) -> None:
    fused = next((f for f in report["findings"] if f["id"] == "optimizer.fused"), None)  # Adam's for-loop step
    pairs = sorted(p / s for p, s in zip(probe["plain_ms"], probe["switched_ms"]))
    if fused is None:
        # Only where the step's share fell under the rule's threshold (other work on the machine
        # slowing the compute) and the probe did not measure the fused step faster in every pair.
        assert probe["error"] is not None or not pairs or pairs[0] <= 1.0, probe
    elif probe["error"] is None:
        assert fused["measured"]["steps"] == 2 * min(len(probe["plain_ms"]), len(probe["switched_ms"]))
    else:  # a machine so busy that the budget ran out: said in the finding's notes
        assert any("not measured" in note for note in fused["notes"])


def _fused_finding(probe: QuickProbeFacts):
    """The optimizer.fused finding with its quick probe's result, as the doctor's report has it."""
    from torchboost.diagnose.measured import with_measured
    from torchboost.evidence.findings import Finding
    from torchboost.evidence.observed import Facts

    finding = Finding(id="optimizer.fused", title="fused optimizer step", evidence={}, expected_speedup=1.2,
                      formula="f")
    [said] = with_measured([finding], Facts(quick_probes=[probe]))
    return said


def test_a_fused_optimizer_probe_that_ran_is_the_findings_measurement():
    """The end-to-end test above on a quiet machine: the fused step probed, its pairs the finding's."""
    probe = QuickProbeFacts("optimizer.fused", "fused optimizer", plain_ms=[12.0, 12.5, 12.2],
                            switched_ms=[10.0, 10.1, 10.3], warmup_ms=1.0)
    fused = _fused_finding(probe)
    assert fused.measured is not None and fused.measured.steps == 2 * 3
    assert fused.measured.ratio == pytest.approx(probe.ratio)
    assert not any("not measured" in note for note in fused.notes)


def test_twin_a_fused_optimizer_probe_the_budget_cut_says_not_measured():
    """The same on a machine so busy the probes' budget ran out: said in the finding's notes."""
    probe = QuickProbeFacts("optimizer.fused", "fused optimizer", plain_ms=[], switched_ms=[], warmup_ms=None,
                            error="was not run: the probes' budget was spent")
    fused = _fused_finding(probe)
    assert fused.measured is None and any("not measured" in note for note in fused.notes)


def _burst_trial(tmp_path, monkeypatch, change, *, own_autocast=False):
    """A tune trial (no profiler window) asked for bursts of ``change``: warm-up 1, recorded 3,
    then 3 pairs of 2-step bursts."""
    spec = ObserveSpec(out_dir=str(tmp_path), steps=3, warmup=1, profile_warmup=0, profile_active=0)
    recorder, done, before, after = _run(tmp_path, monkeypatch, own_autocast=own_autocast, spec=spec,
                                         bursts=Bursts(change, steps=2, pairs=3))
    return recorder.facts(), done, before, after


def test_a_burst_trial_alternates_the_candidates_switch_in_bursts(tmp_path, monkeypatch):
    facts, done, before, after = _burst_trial(tmp_path, monkeypatch, {"precision.mode": "bf16"})
    [probe] = facts.quick_probes
    assert probe.error is None and probe.label == "bf16 autocast"
    assert len(probe.plain_ms) == len(probe.switched_ms) == 2 * 3 and probe.warmup_ms is not None
    assert done == 1 + 3 + (1 + 2 * 2 * 3) - 1  # its last burst step's boundary stops the script
    assert_only_recorded(facts)
    assert after == before


@pytest.mark.parametrize("change, own_autocast, why", [
    ({"optimizer.implementation": "foreach"}, False, "no switch makes optimizer.implementation=foreach"),  # none has
    ({"precision.mode": "bf16"}, True, "no switch makes precision.mode=bf16"),  # the script's own autocast
    ({"precision.mode": "fp16"}, False, "no switch makes precision.mode=fp16"),  # the CPU's switch is bf16's
])
def test_twin_a_burst_trial_without_the_candidates_switch_says_why_and_stops(tmp_path, monkeypatch, change,
                                                                            own_autocast, why):
    facts, done, *_ = _burst_trial(tmp_path, monkeypatch, change, own_autocast=own_autocast)
    [probe] = facts.quick_probes
    assert why in probe.error and not probe.switched_ms
    assert done == 1 + 3 - 1


def test_probes_of_slow_steps_get_a_floor_of_time_and_two_pairs():
    """After 40 s of a run of 3 s steps a quarter (10 s) fits no probe: the floor of 20 s
    does, in two pairs. Twin: fast steps keep three pairs, a long run its quarter."""
    from torchboost.observe.probes.quick import QUICK_PAIRS, quick_budget_ms, quick_pairs

    assert quick_budget_ms(40.0) == 20_000.0 and quick_pairs(3000.0) == 2
    assert quick_budget_ms(400.0) == 100_000.0 and quick_pairs(50.0) == QUICK_PAIRS
