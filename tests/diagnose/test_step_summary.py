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
    assert s.breakdown_pct == pytest.approx({"data": 20, "forward": 30, "backward": 30, "optimizer": 10,
                                             "checkpoint": 0, "output": 0, "other": 10})
    # the phases rest on the typical steps, 40-80 ms (within 1.5x of the 55 ms median)
    assert s.phase_ms["forward"] == pytest.approx(18.0) and s.steps_set_aside == 5
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
    assert s.breakdown_pct == {p: 0.0 for p in ("data", "forward", "backward", "optimizer", "checkpoint", "output",
                                                "other")}
    assert s.samples_per_s is None


@pytest.mark.parametrize("q", [0, 10, 50, 90, 99, 100])
def test_percentile_matches_numpy_linear(q):
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_six_slowed_steps_leave_the_phase_table_adding_up_to_the_median():
    # 14 steps of 30 ms (optimizer 2.4 ms, 8%), six slowed to 90 ms by another process with
    # the optimizer taking 25% of them: the headline is the median step.
    quiet = [_step(i, 30.0, shares=(0.0, 0.3, 0.62, 0.08)) for i in range(14)]
    slowed = [_step(14 + i, 90.0, shares=(0.0, 0.25, 0.45, 0.25)) for i in range(6)]
    s = summarize(Facts(steps=quiet + slowed))
    assert s.step_time_ms["median"] == 30.0 and s.steps_set_aside == 6
    assert sum(s.phase_ms.values()) == pytest.approx(30.0)
    assert s.breakdown_pct["optimizer"] == pytest.approx(8.0)


def test_twin_plain_means_over_every_step_do_not_add_up_to_the_median(monkeypatch):
    monkeypatch.setattr("torchboost.evidence.steps.OUTLIER_RATIO", float("inf"))  # nothing set aside
    quiet = [_step(i, 30.0, shares=(0.0, 0.3, 0.62, 0.08)) for i in range(14)]
    slowed = [_step(14 + i, 90.0, shares=(0.0, 0.25, 0.45, 0.25)) for i in range(6)]
    s = summarize(Facts(steps=quiet + slowed))
    assert s.steps_set_aside == 0 and sum(s.phase_ms.values()) == pytest.approx(48.0)  # 60% over the median
    assert s.breakdown_pct["optimizer"] == pytest.approx(17.56, abs=0.01)  # twice the script's own 8%


def test_steady_steps_set_nothing_aside():
    s = summarize(Facts(steps=[_step(i, 30.0 + (i % 3)) for i in range(20)]))
    assert s.steps_set_aside == 0 and sum(s.phase_ms.values()) == pytest.approx(s.step_time_ms["mean"])
