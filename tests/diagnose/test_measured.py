"""Findings with the quick probes' measurements: ranked by them, one slower than plain last."""

from __future__ import annotations

import dataclasses
import json

import pytest

from torchboost.diagnose.headroom import cap_findings
from torchboost.diagnose.measured import ranked, with_measured
from torchboost.evidence.findings import Finding, Measured
from torchboost.evidence.observed import Facts, QuickProbeFacts
from torchboost.report import _format as fmt
from torchboost.report.doctor_report import build_report
from torchboost.report.markdown import render_markdown


def _finding(fid: str, estimate: float) -> Finding:
    return Finding(id=fid, title=fid, evidence={}, expected_speedup=estimate, formula="f")


def _probe(fid: str, plain: float, switched: float, error: str | None = None) -> QuickProbeFacts:
    return QuickProbeFacts(fid, f"{fid} on", plain_ms=[plain] * 3, switched_ms=[switched] * 3, warmup_ms=1.0,
                           error=error)


FINDINGS = [_finding("precision.lower", 1.5), _finding("optimizer.fused", 1.2), _finding("fp32_math.bf16", 1.1)]


def _ids(findings: list[Finding]) -> list[str]:
    return [f.id for f in findings]


def test_a_measured_finding_carries_its_ratio_and_is_ranked_by_it():
    facts = Facts(quick_probes=[_probe("fp32_math.bf16", 100.0, 40.0)])
    out = ranked(with_measured(FINDINGS, facts))
    top = out[0]
    assert top.id == "fp32_math.bf16" and top.measured == Measured(2.5, 6, "fp32_math.bf16 on", 2.5, 2.5)
    assert top.expected_speedup == 1.1  # the estimate stays beside it
    assert any(n.startswith("measured over 6 steps: x2.50") for n in top.notes)
    assert top.severity == "high"  # from the measurement


def test_twin_without_probes_the_estimates_rank():
    assert _ids(ranked(with_measured(FINDINGS, Facts()))) == ["precision.lower", "optimizer.fused", "fp32_math.bf16"]


def test_a_finding_measured_slower_than_plain_says_so_and_ranks_last():
    facts = Facts(quick_probes=[_probe("precision.lower", 100.0, 125.0)])
    out = ranked(with_measured(FINDINGS, facts))
    assert _ids(out) == ["optimizer.fused", "fp32_math.bf16", "precision.lower"]
    last = out[-1]
    assert last.measured.hopeless and "measured slower here" in last.title
    assert any("slower than the script as it is" in n for n in last.notes)


def test_twin_a_finding_measured_faster_than_its_estimate_is_not_last():
    facts = Facts(quick_probes=[_probe("precision.lower", 100.0, 80.0)])
    out = ranked(with_measured(FINDINGS, facts))
    assert out[0].id == "precision.lower" and not out[0].measured.hopeless


def test_a_failed_probe_leaves_the_estimate_and_says_why():
    facts = Facts(quick_probes=[_probe("optimizer.fused", 100.0, 50.0, error="made the loss NaN or inf")])
    fused = next(f for f in with_measured(FINDINGS, facts) if f.id == "optimizer.fused")
    assert fused.measured is None and any("made the loss NaN or inf" in n for n in fused.notes)


def test_capping_the_estimates_keeps_the_measured_ranking():
    facts = Facts(quick_probes=[_probe("fp32_math.bf16", 100.0, 50.0)])
    out = cap_findings(with_measured(FINDINGS, facts), None)
    assert out[0].id == "precision.lower"  # without a headroom cap_findings leaves them as given
    from torchboost.diagnose.headroom import Headroom

    headroom = Headroom(flops_per_step=1, achieved_flops_per_s=1.0, peak_flops_per_s=1.1, dtype="fp32", mfu_pct=90.0,
                        bound="compute", why="", best_speedup=1.11, machine={})
    capped = cap_findings(with_measured(FINDINGS, facts), headroom)
    assert capped[0].id == "fp32_math.bf16" and capped[0].measured.ratio == 2.0  # a measurement is not capped


def test_finding_and_facts_round_trip_with_their_measurements():
    finding = with_measured(FINDINGS, Facts(quick_probes=[_probe("precision.lower", 90.0, 30.0)]))[0]
    assert Finding.from_dict(json.loads(json.dumps(finding.to_dict()))) == finding
    facts = Facts(quick_probes=[_probe("precision.lower", 90.0, 30.0)])
    again = Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again.quick_probes == facts.quick_probes and again.quick_probes[0].ratio == 3.0


def test_the_reports_give_the_measurement_beside_the_estimate():
    facts = Facts(quick_probes=[_probe("fp32_math.bf16", 100.0, 40.0)])
    report = build_report(facts, ranked(with_measured(FINDINGS, facts)))
    top = report["findings"][0]
    assert top["measured"] == {"ratio": 2.5, "steps": 6, "label": "fp32_math.bf16 on", "low": 2.5, "high": 2.5}
    assert fmt.gain(top) == "x1.10 est., measured x2.50"
    assert "Measured over 6 steps: x2.50 (fp32_math.bf16 on against plain steps)." in render_markdown(report)
    # the twin: not measured, the estimate alone, labelled rough
    assert fmt.gain(report["findings"][1]) == "x1.50 rough est." and fmt.measured(report["findings"][1]) == ""


def _shaken(fid: str) -> QuickProbeFacts:
    """bf16's probe on a machine where another process slowed some steps many times over:
    its pairs 3.28, 0.49 and 0.79 (a tune of nanoGPT beside another tune)."""
    return QuickProbeFacts(fid, f"{fid} on", plain_ms=[570.3, 201.8, 156.6], switched_ms=[173.7, 410.6, 197.8],
                           warmup_ms=400.0)


def test_a_probe_whose_pairs_disagree_measured_nothing():
    out = ranked(with_measured(FINDINGS, Facts(quick_probes=[_shaken("precision.lower")])))
    bf16 = out[0]
    assert bf16.id == "precision.lower"  # ranked by its estimate, x1.5, not the median x0.79
    assert not bf16.measured.agree and not bf16.measured.hopeless
    assert "measured slower here" not in bf16.title
    assert any("its pairs from x0.49 to x3.28: no measurement either way" in n for n in bf16.notes)
    report = build_report(Facts(quick_probes=[_shaken("precision.lower")]), out)
    assert fmt.gain(report["findings"][0]) == "x1.50 rough est., pairs disagreed"
    assert "no measurement either way" in fmt.measured(report["findings"][0])


def test_pairs_on_both_sides_of_one_but_close_to_it_bound_the_estimate():
    """bf16's pairs from x0.98 to x1.08 beside anomaly detection measured at x1.69: the
    estimate, x1.92, is held to the best pair, so the measured switch ranks first. Twin: the
    shaken pairs above (up to x3.28) leave the estimate as it is."""
    close = QuickProbeFacts("precision.lower", "bf16 on", plain_ms=[100.0, 108.0, 101.0],
                            switched_ms=[102.0, 100.0, 100.0], warmup_ms=1.0)
    anomaly = QuickProbeFacts("debug.anomaly", "anomaly off", plain_ms=[169.0] * 3, switched_ms=[100.0] * 3,
                              warmup_ms=1.0)
    findings = [_finding("precision.lower", 1.92), _finding("debug.anomaly", 1.0)]
    out = ranked(with_measured(findings, Facts(quick_probes=[close, anomaly])))
    assert _ids(out) == ["debug.anomaly", "precision.lower"] and out[1].rank_speedup == pytest.approx(1.08)
    shaken = with_measured(FINDINGS, Facts(quick_probes=[_shaken("precision.lower")]))
    assert shaken[0].rank_speedup == 1.5


def test_twin_pairs_that_agree_slower_rank_it_last():
    slower = QuickProbeFacts("precision.lower", "bf16 on", plain_ms=[100.0, 120.0, 90.0],
                             switched_ms=[130.0, 150.0, 100.0], warmup_ms=1.0)
    out = ranked(with_measured(FINDINGS, Facts(quick_probes=[slower])))
    assert out[-1].id == "precision.lower" and out[-1].measured.agree and out[-1].measured.hopeless


def test_a_finding_with_no_figure_of_its_own_is_said_not_estimated_beside_its_measurement():
    facts = Facts(quick_probes=[_probe("debug.anomaly", 100.0, 40.0)])
    [top] = with_measured([_finding("debug.anomaly", 1.0)], facts)
    assert top.notes == ["measured over 6 steps: x2.50 (debug.anomaly on against plain steps, interleaved; "
                         "not estimated); ranked by the measurement"]
    entry = {"expected_speedup": 1.0, "measured": dataclasses.asdict(top.measured)}
    assert fmt.gain(entry) == "measured x2.50, not estimated"
    assert fmt.gain({"expected_speedup": 1.0}) == "not estimated" and fmt.expected(1.0) == "not estimated"


def test_twin_an_estimated_finding_keeps_its_figure_beside_its_measurement():
    facts = Facts(quick_probes=[_probe("fp32_math.bf16", 100.0, 40.0)])
    [top] = with_measured([_finding("fp32_math.bf16", 1.1)], facts)
    assert "estimated x1.10); ranked by the measurement" in top.notes[0]
    entry = {"expected_speedup": 1.1, "measured": dataclasses.asdict(top.measured)}
    assert fmt.gain(entry) == "x1.10 est., measured x2.50" and fmt.expected(1.1) == "x1.10"
