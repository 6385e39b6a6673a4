"""The replay bound caps the data findings: no loader change beats a step fed from memory."""

from __future__ import annotations

import pytest

from torchboost.diagnose import diagnose
from torchboost.diagnose.data_bound import cap_by_replay, replay_bound
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts, LoaderFacts, StepRecord


def _facts(replay_ms: list[float]) -> Facts:
    # 100 ms steps, 60 of them waiting for one loader process
    return Facts(steps=[StepRecord(i, 100.0, data_ms=60.0, forward_ms=20.0, backward_ms=15.0) for i in range(8)],
                 loader=LoaderFacts(num_workers=0, batch_size=32), env={"device": "cpu", "cpu_cores": 8},
                 cpu_threads=8, replay_step_ms=replay_ms)


def _finding(fid: str, speedup: float) -> Finding:
    return Finding(id=fid, title="t", evidence={}, expected_speedup=speedup, formula="f")


def test_the_bound_is_the_recorded_median_over_the_replayed_median():
    assert replay_bound(_facts([50.0, 40.0, 45.0])) == (pytest.approx(100 / 45), 100.0, 45.0)
    assert replay_bound(_facts([])) is None


def test_a_data_gain_above_the_bound_is_capped_and_one_below_keeps_its_estimate():
    capped, kept, other = cap_by_replay([_finding("data.workers", 2.5), _finding("data.pin_memory", 1.1),
                                         _finding("optimizer.fused", 2.5)], _facts([80.0]))
    assert capped.expected_speedup == pytest.approx(1.25)
    assert "capped there (estimated 2.50x)" in capped.notes[-1]
    assert kept.expected_speedup == 1.1 and kept.notes[-1].startswith("measured: fed batches already seen")
    assert other.expected_speedup == 2.5 and other.notes == []  # not a loader change: not bounded by it


def test_diagnose_shows_no_data_gain_above_the_bound_and_the_twin_without_replay_does():
    bounded = [f for f in diagnose(_facts([80.0])) if f.id.startswith("data.")]
    unbounded = [f for f in diagnose(_facts([])) if f.id.startswith("data.")]
    assert bounded and all(f.expected_speedup <= 1.25 + 1e-9 for f in bounded)
    assert any(f.expected_speedup > 1.25 for f in unbounded)  # the estimate alone claims more
