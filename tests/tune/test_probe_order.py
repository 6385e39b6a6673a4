"""The doctor's quick probes order the search, and a lever they measured slower is skipped with its evidence."""

from __future__ import annotations

import dataclasses

import pytest

from test_search import CPU2, FakeScript

from torchboost.evidence.findings import Measured
from torchboost.techniques.precision import PrecisionTuning
from torchboost.tune.search.levers import default_levers, order_levers
from torchboost.tune.search import SearchOptions, run_search

# bf16 where the CPU has it: fp32_math's lever is proposed too.
BF16_CPU = CPU2.with_own(PrecisionTuning(cpu_bf16=True))
ESTIMATES = {"data.workers": 1.3, "precision.lower": 1.1}


@pytest.mark.parametrize("measured, first", [({"precision.lower": Measured(1.6, 6, "bf16 autocast")}, "precision"),
                                             ({}, "host")])
def test_a_measured_ratio_orders_the_levers_over_the_estimates(measured, first):
    # The estimate puts the loader first; the doctor timed bf16 1.6x on the script itself.
    # Twin: without the measurement the estimates order them.
    levers = order_levers(default_levers(), ESTIMATES, measured)
    assert levers[0].id == first


def _first_trial_lever(measured):
    context = dataclasses.replace(BF16_CPU, measured=measured)
    script = FakeScript(factors={("precision.mode", "bf16"): 0.6})
    levers = order_levers(default_levers(), ESTIMATES, measured)
    outcome = run_search(levers, context, script, SearchOptions(run_steps=1000))
    changed = [settings for settings, _ in script.calls if settings]
    return outcome, changed


def test_the_top_measured_candidate_is_the_first_one_tried():
    outcome, changed = _first_trial_lever({"precision.lower": Measured(1.6, 6, "bf16 autocast")})
    assert changed[0] == {"precision.mode": "bf16"}
    assert outcome.settings["precision.mode"] == "bf16"


@pytest.mark.parametrize("ratio, skipped", [(0.66, True), (1.2, False)])
def test_a_lever_measured_slower_is_skipped_with_the_evidence(ratio, skipped):
    outcome, changed = _first_trial_lever({"precision.lower": Measured(ratio, 6, "bf16 autocast")})
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    tried = any(s.get("precision.mode") == "bf16" for s in changed)
    assert tried is not skipped  # twin: measured faster, it is tried (and kept: 0.6x in the fake)
    if skipped:
        assert decision.status == "skipped"
        assert decision.reason == ("the doctor measured x0.66 over 6 steps (bf16 autocast against plain steps, "
                                   "interleaved): slower here")
    else:
        assert decision.status == "kept"


@pytest.mark.parametrize("low, high, skipped", [(0.49, 3.28, False), (0.49, 0.9, True)])
def test_a_probe_whose_pairs_disagree_skips_nothing_and_orders_nothing(low, high, skipped):
    """bf16's probe on a machine another process shook: the median 0.79 of pairs from 0.49 to
    3.28 measured nothing, so bf16 is tried, in its estimate's place. Twin: every pair slower."""
    measured = {"precision.lower": Measured(0.79, 6, "bf16 autocast", low, high)}
    outcome, changed = _first_trial_lever(measured)
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    assert (decision.status == "skipped") is skipped
    assert any(s.get("precision.mode") == "bf16" for s in changed) is not skipped
    first = order_levers(default_levers(), {**ESTIMATES, "precision.lower": 1.5}, measured)[0].id
    assert (first == "precision") is not skipped  # disagreeing pairs: its estimate, x1.5, orders it first


def test_a_measurement_of_another_change_does_not_skip_a_lever():
    # The optimizer's probe timed the fused kernel; its lever tries foreach too: not skipped.
    outcome, changed = _first_trial_lever({"optimizer.fused": Measured(0.8, 6, "fused AdamW")})
    assert any("optimizer.implementation" in s for s in changed)


def test_the_tuner_reads_the_probes_from_the_doctors_facts():
    from torchboost.evidence.observed import Facts, QuickProbeFacts
    from torchboost.tune.tuner import context_from_facts

    probes = [QuickProbeFacts("precision.lower", "bf16 autocast", plain_ms=[100, 100, 100], switched_ms=[150, 150, 150]),
              QuickProbeFacts("optimizer.fused", "fused AdamW", error="was not run")]
    context = context_from_facts(Facts(quick_probes=probes))
    assert set(context.measured) == {"precision.lower"}  # a probe without a ratio measured nothing
    assert context.measured["precision.lower"].ratio == pytest.approx(100 / 150)
    assert context.measured["precision.lower"].steps == 6


@pytest.mark.parametrize("threads, first", [(Measured(34.0, 6, "1 intra-op thread"), "host"), (None, "fp32_math")])
def test_a_probe_of_a_levers_finding_orders_it_by_what_it_measured(threads, first):
    """Beside a busy loop the doctor probed one thread at x34 (threads.contended: a finding of
    the workers-and-threads lever, whose own change is not one probe) and bf16 math at x1.5;
    the search took bf16 math first, by the threads finding's estimate, and its budget ran
    out before threads. Twin: without the threads probe, the estimate orders it behind."""
    estimates = {"threads.contended": 1.3, "fp32_math.bf16": 1.2}
    measured = {"fp32_math.bf16": Measured(1.5, 6, "bf16 math")}
    if threads is not None:
        measured["threads.contended"] = threads
    order = [lever.id for lever in order_levers(default_levers(), estimates, measured)]
    other = "fp32_math" if first == "host" else "host"
    assert order.index(first) < order.index(other), order
