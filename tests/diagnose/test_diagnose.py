"""diagnose(): the registry, thresholds by name, ranking, and the Finding/Facts round-trips."""

from __future__ import annotations

import inspect
import json

import pytest

from _diagnose_helpers import make_facts, with_
from torchboost.diagnose import RULES, Facts, Finding, diagnose, thresholds
from torchboost.techniques.registry import techniques

REQUIRED_IDS = {
    "data.workers", "data.pin_memory", "data.persistent_workers", "precision.lower",
    "precision.slower_on_cpu", "compile.enable", "sync.host_device", "optimizer.fused",
    "memory.headroom", "threads.oversubscribed", "cudnn.benchmark", "memory.channels_last",
    "gpu.idle", "gpu.syncs", "gpu.pageable_copies", "gpu.small_kernels", "gpu.collectives", "loss.nonfinite",
    "host.checkpoint", "host.output", "host.tracker", "host.sync", "host.line",
    "evaluation.often", "evaluation.grad", "evaluation.batch",
}
UNIT_SUFFIXES = ("_pct", "_s", "_per_step", "_ratio", "_speedup", "_ms", "_bytes")


def test_registry_has_every_required_id_and_documented_rules():
    # The ids here are the floor: a new technique brings its own rules, declared in its module.
    assert REQUIRED_IDS <= set(RULES)
    declared = [rule.id for t in techniques() for rule in t.rules]
    assert len(declared) == len(set(declared)) and set(RULES) - REQUIRED_IDS <= set(declared)
    for rule_id, rule in RULES.items():
        assert rule.__doc__, f"{rule_id}: rule without a docstring"
        params = list(inspect.signature(rule).parameters.values())
        assert params[0].name == "facts"
        for p in params[1:]:
            assert p.kind is inspect.Parameter.KEYWORD_ONLY, f"{rule_id}: {p.name} must be keyword-only"
            assert p.name.endswith(UNIT_SUFFIXES), f"{rule_id}: threshold {p.name} has no unit in its name"


def test_thresholds_lists_the_defaults():
    known = thresholds()
    assert known["data_wait_pct"] == 20.0 and known["sync_per_step"] == 1.0


def _data_bound_facts() -> Facts:
    # Data 60% of the step, main-process loading of a map-style dataset; a slow unfused
    # optimizer and oversubscribed threads compete for the top place.
    facts = make_facts(cores=8, data=60.0, forward=15.0, backward=10.0, optimizer=10.0, other=5.0)
    return with_(facts, loader={"num_workers": 0, "iterable": False}, optimizer={"fused": None},
                 cpu_threads=16)


def test_data_bound_run_ranks_data_workers_first():
    findings = diagnose(_data_bound_facts())
    ids = [f.id for f in findings]
    assert ids[0] == "data.workers"
    assert {"optimizer.fused", "threads.oversubscribed"} <= set(ids)
    speedups = [f.expected_speedup for f in findings]
    assert speedups == sorted(speedups, reverse=True)


def test_threshold_override_reaches_the_rule_and_unknown_names_fail():
    ids = [f.id for f in diagnose(_data_bound_facts(), data_wait_pct=70.0)]
    assert "data.workers" not in ids
    with pytest.raises(TypeError, match="data_wait_pct"):
        diagnose(_data_bound_facts(), data_wait=70.0)


def test_no_step_observed_gives_no_finding():
    assert diagnose(with_(make_facts(), steps=[])) == []
    assert diagnose(Facts()) == []


def test_finding_round_trips_through_json():
    finding = diagnose(_data_bound_facts())[0]
    again = Finding.from_dict(json.loads(json.dumps(finding.to_dict())))
    assert again == finding
    assert finding.severity == "high"  # 2.5x


def test_finding_rejects_an_unknown_severity():
    with pytest.raises(ValueError, match="severity"):
        Finding(id="x", title="t", evidence={}, expected_speedup=1.1,
                formula="", severity="urgent")


def test_facts_new_fields_round_trip():
    facts = with_(make_facts(), cpu_bf16_speedup=1.7, target_steps=20)
    again = Facts.from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again.cpu_bf16_speedup == 1.7 and again.target_steps == 20
    assert again == facts
