"""The doctor on Apple's MPS (faked): the precision and compile findings a CUDA user gets, from
the environment's MPS facts, worded as estimates and held against no peak; each with its twin."""

from __future__ import annotations

import json

import pytest
import torch

from test_finding_words import estimate_problems, rendered, run_figures, unbacked_figures
from torchboost.diagnose import diagnose
from torchboost.diagnose.headroom import cap_findings, measured_headroom
from torchboost.env import Environment
from torchboost.evidence.observed import Facts, ModelFacts, StepRecord
from torchboost.evidence.rulekit import amdahl
from torchboost.report.doctor_report import build_report
from torchboost.techniques.precision.precision_diagnosis import PrecisionFacts


def _mps_facts(*, mps_bf16: bool = True, mps_inductor: bool = True) -> Facts:
    """An fp32, eager model on 'mps', forward and backward 80% of a 100 ms step, the environment
    as the probe writes it on a Mac."""
    here = Environment(device="mps", torch_version=torch.__version__, cpu_cores=8, ram_bytes=16 << 30,
                       ram_available_bytes=8 << 30, compiler="/usr/bin/clang++", mps_bf16=mps_bf16,
                       mps_inductor=mps_inductor)
    steps = [StepRecord(i, 100.0, 5.0, 40.0, 40.0, 5.0) for i in range(12)]
    return Facts(env=here.to_dict(), command=["python", "train.py"], steps=steps, warmup_steps=2,
                 flops_per_step=1e9, flops_by_op={"aten.mm": 1e9},
                 model=ModelFacts(class_name="Net", parameters=1_000_000, trainable_parameters=1_000_000,
                                  param_dtypes=["torch.float32"], device="mps:0"),
                 techniques={"precision": PrecisionFacts()})


def _doctor(facts: Facts):
    """What the doctor does after the run: the headroom (none measured for MPS), the findings
    capped by it, the report."""
    headroom = measured_headroom(facts)
    findings = cap_findings(diagnose(facts), headroom)
    return {f.id: f for f in findings}, headroom, build_report(facts, findings, headroom=headroom)


def test_on_a_fake_mps_the_doctor_offers_the_precision_finding():
    found, _, report = _doctor(_mps_facts())
    precision = found["precision.lower"]
    assert precision.fix.to_dict() == {"precision.mode": "bf16"} and "use bf16 autocast" in precision.title
    assert precision.expected_speedup == pytest.approx(amdahl(0.8, 1.31))  # an estimate, nothing capped it
    assert "public threads" in precision.formula and "not measured here" in precision.formula
    assert "precision.lower" in [f["id"] for f in report["findings"]]


def test_on_a_fake_mps_the_doctor_offers_the_compile_finding():
    found, _, _ = _doctor(_mps_facts())
    compiled = found["compile.enable"]
    assert compiled.fix.to_dict() == {"compile.mode": "default"}
    assert "s = 1.1 on mps" in compiled.formula and any("prototype" in n for n in compiled.notes)


def test_twin_mps_without_bf16_or_the_metal_backend_offers_neither():
    found, _, _ = _doctor(_mps_facts(mps_bf16=False, mps_inductor=False))
    assert "precision.lower" not in found and "compile.enable" not in found


def test_no_peak_is_claimed_on_mps():
    _, headroom, report = _doctor(_mps_facts())
    assert (headroom.peak_flops_per_s, headroom.mfu_pct, headroom.best_speedup) == (None, None, None)
    assert report["headroom"]["peak_flops_per_s"] is None and report["headroom"]["mfu_pct"] is None
    assert "whose peak the probe does not measure" in headroom.line
    json.dumps(report, allow_nan=False)


@pytest.mark.parametrize("finding_id", ["precision.lower", "compile.enable"])
def test_the_mps_findings_word_their_gains_as_estimates(finding_id):
    facts = _mps_facts()
    found, _, _ = _doctor(facts)
    report, texts = rendered(facts, found[finding_id])
    known = run_figures(report)
    assert {where: bad for where, text in texts.items() if (bad := unbacked_figures(text, known))} == {}
    assert estimate_problems(report["findings"][0]) == []
    assert "est." in texts["terminal"]
