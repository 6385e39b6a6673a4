"""Operators against their roofs, on figures worked out by hand.

Machine: peak 100 GFLOP/s, bandwidth 10 GB/s; the ridge is at 10 FLOP per byte.

- ``aten::mm``: 2e9 FLOPs, 1.2e7 bytes (167 FLOP/byte, right of the ridge), 40 ms:
  50 GFLOP/s against a roof of the peak, 100 GFLOP/s: 50%, compute-bound.
- ``aten::bmm``: 1e8 FLOPs, 1e8 bytes (1 FLOP/byte, left of the ridge), 20 ms: 5 GFLOP/s
  against a roof of 1 x 10 GB/s = 10 GFLOP/s: 50%, memory-bound (against the peak alone,
  the broken twin, it would read 5%).
- ``aten::add``: no FLOPs, 1e8 bytes in 20 ms: 5 GB/s, 50% of the bandwidth, memory-bound.
"""

from __future__ import annotations

import pytest

from torchboost.diagnose import roofline
from torchboost.diagnose.roofline import op_roofs
from torchboost.evidence.observed import Facts, ProfileFacts

PEAK, BANDWIDTH = 100e9, 10e9


def _facts() -> Facts:
    ops = [{"name": name, "self_cpu_ms": ms * 2, "self_device_ms": 0.0, "calls": 2}
           for name, ms in (("aten::mm", 40.0), ("aten::bmm", 20.0), ("aten::add", 20.0))]
    return Facts(profile=ProfileFacts(steps=2, top_ops=ops), flops_by_op={"aten.mm": 2_000_000_000, "aten.bmm": 100_000_000},
                 bytes_by_op={"aten.mm": 12_000_000, "aten.bmm": 100_000_000, "aten.add": 100_000_000})


def test_each_op_is_measured_against_the_roof_at_its_intensity():
    roofs = {r.name: r for r in op_roofs(_facts(), PEAK, BANDWIDTH)}
    mm, bmm, add = roofs["aten::mm"], roofs["aten::bmm"], roofs["aten::add"]
    assert mm.achieved_flops_per_s == pytest.approx(50e9) and mm.roof_flops_per_s == pytest.approx(PEAK)
    assert mm.pct_of_roof == pytest.approx(50.0) and mm.bound == "compute"
    assert bmm.intensity == pytest.approx(1.0) and bmm.roof_flops_per_s == pytest.approx(10e9)
    assert bmm.pct_of_roof == pytest.approx(50.0) and bmm.bound == "memory"
    assert add.flops is None and add.achieved_bytes_per_s == pytest.approx(5e9)
    assert add.pct_of_roof == pytest.approx(50.0) and add.bound == "memory"


def test_twin_a_roof_of_the_peak_alone_misjudges_the_memory_bound_op(monkeypatch):
    real = roofline._roof
    monkeypatch.setattr(roofline, "_roof", lambda name, ms, flops, moved, peak, bandwidth:
                        real(name, ms, flops, None, peak, bandwidth))  # bytes dropped: the roof is the peak
    bmm = {r.name: r for r in op_roofs(_facts(), PEAK, BANDWIDTH)}["aten::bmm"]
    assert bmm.pct_of_roof != pytest.approx(50.0)


def test_without_a_profile_or_any_count_there_is_no_roofline():
    assert op_roofs(Facts(), PEAK, BANDWIDTH) == ()
    no_counts = Facts(profile=_facts().profile)
    assert op_roofs(no_counts, PEAK, BANDWIDTH) == ()


def test_an_op_with_a_peak_of_its_own_is_held_against_it():
    """``aten::mm`` held against a peak 4x the step's (an fp32 step's convolutions in TF32
    are held so): 50 GFLOP/s against 400 reads 12.5%; the others keep the step's peak."""
    roofs = {r.name: r for r in op_roofs(_facts(), PEAK, BANDWIDTH, {"aten.mm": 4 * PEAK})}
    assert roofs["aten::mm"].roof_flops_per_s == pytest.approx(4 * PEAK)
    assert roofs["aten::mm"].pct_of_roof == pytest.approx(12.5)
    assert roofs["aten::bmm"].pct_of_roof == pytest.approx(50.0)  # memory-bound, as before
