"""summarize(): exact statistics on hand-made steps."""

from __future__ import annotations

import numpy as np
import pytest

from torchboost.diagnose import Facts, LoaderFacts, StepRecord, summarize
from torchboost.evidence.steps import percentile


def _step(i, total, shares=(0.2, 0.3, 0.3, 0.1)):
    d, f, b, o = (total * s for s in shares)
    return StepRecord(index=i, total_ms=total, data_ms=d, forward_ms=f, backward_ms=b, optimizer_ms=o)


def test_median_p90_mean_and_breakdown():
    facts = Facts(steps=[_step(i, 10.0 * (i + 1)) for i in range(10)])  # 10, 20, ..., 100 ms
    s = summarize(facts)
    assert s.steps_observed == 10 and s.steps_measured == 10
    assert s.step_time_ms == {"median": 55.0, "p90": 91.0, "mean": 55.0}
    assert s.breakdown_pct == pytest.approx({"data": 20, "forward": 30, "backward": 30, "optimizer": 10, "other": 10})
    assert s.phase_ms["forward"] == pytest.approx(16.5)
    assert s.samples_per_s is None


def test_warmup_steps_are_left_out_of_the_statistics():
    recs = [_step(0, 5000.0), _step(1, 3000.0)] + [_step(i, 100.0) for i in range(2, 7)]
    s = summarize(Facts(steps=recs, warmup_steps=2))
    assert s.steps_observed == 7 and s.steps_measured == 5
    assert s.step_time_ms["median"] == 100.0 and s.step_time_ms["p90"] == 100.0
    # When every step is warm-up, statistics use all of them rather than none.
    assert summarize(Facts(steps=recs[:2], warmup_steps=2)).step_time_ms["median"] == 4000.0


def test_overlapping_phases_still_sum_to_100():
    rec = StepRecord(index=0, total_ms=10.0, data_ms=3.0, forward_ms=4.0, backward_ms=4.0, optimizer_ms=1.0)
    s = summarize(Facts(steps=[rec]))
    assert s.breakdown_pct["other"] == 0.0
    assert sum(s.breakdown_pct.values()) == pytest.approx(100.0)
    assert s.breakdown_pct["data"] == pytest.approx(25.0)  # 3 of the 12 ms seen


def test_samples_per_s_from_the_batch_size():
    facts = Facts(steps=[_step(i, 100.0) for i in range(10)], loader=LoaderFacts(batch_size=32))
    assert summarize(facts).samples_per_s == pytest.approx(320.0)


def test_empty_steps():
    s = summarize(Facts())
    assert s.steps_observed == 0 and s.steps_measured == 0
    assert s.step_time_ms == {"median": None, "p90": None, "mean": None}
    assert s.breakdown_pct == {p: 0.0 for p in ("data", "forward", "backward", "optimizer", "other")}
    assert s.samples_per_s is None


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentile_matches_numpy_linear(q):
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
