"""Each GPU rule on hand-made facts: it fires past its threshold, not below, with its formula."""

from __future__ import annotations

import pytest

from torchboost.frameworks import fix_toml
from torchboost.diagnose import Facts, StepRecord
from torchboost.diagnose import _gpu_rules as R
from torchboost.diagnose.gpu import GpuFacts


def _facts(data_ms: float = 0.0, **gpu) -> Facts:
    base = GpuFacts(span_ms=100.0, busy_pct=60.0, idle_pct=40.0, compute_pct=50.0, non_compute_pct=10.0,
                    kernels=1000, small_kernel_pct=20.0, steps=4).to_dict()
    steps = [StepRecord(i, 25.0, data_ms=data_ms) for i in range(4)]
    return Facts(env={"device": "cuda"}, steps=steps, gpu={**base, **gpu})


def test_idle_gpu_with_a_slow_loader_is_told_to_load_in_workers():
    f = R.gpu_idle(_facts(data_ms=10.0))  # 40% of the step waiting for data
    assert f.id == "gpu.idle" and "waiting for data" in f.title and "num_workers" in fix_toml(f)
    assert f.expected_speedup == pytest.approx(1 / (1 - 0.5 * 0.40))


def test_idle_gpu_with_a_fast_loader_is_launch_bound():
    f = R.gpu_idle(_facts(data_ms=1.0))
    assert "launch-bound" in f.title and "compile" in fix_toml(f)


def test_a_busy_gpu_gets_no_idle_finding():
    assert R.gpu_idle(_facts(idle_pct=8.0, busy_pct=92.0)) is None
    assert R.gpu_idle(_facts(), idle_pct=50.0) is None  # the threshold is the rule's own


def test_syncs_per_step():
    f = R.gpu_syncs(_facts(syncs=8, sync_ops={"aten::item": 8}))
    assert f.evidence["syncs_per_step"] == 2.0 and "aten::item x8" in f.title
    assert R.gpu_syncs(_facts(syncs=2)) is None  # half a sync per step
    assert R.gpu_syncs(_facts(syncs=8, idle_pct=5.0)) is None  # the device never waits


def test_pageable_copies():
    f = R.gpu_pageable_copies(_facts(h2d_pageable_count=8, h2d_pageable_bytes=8 << 20, memcpy_ms=10.0))
    assert "pin_memory = true" in fix_toml(f) and f.expected_speedup == pytest.approx(1 / 0.9)
    assert R.gpu_pageable_copies(_facts(h2d_pageable_count=2)) is None


def test_small_kernels():
    assert R.gpu_small_kernels(_facts(small_kernel_pct=70.0)).id == "gpu.small_kernels"
    assert R.gpu_small_kernels(_facts(small_kernel_pct=30.0)) is None
    assert R.gpu_small_kernels(_facts(small_kernel_pct=70.0, idle_pct=5.0)) is None


def test_collectives_not_overlapping():
    f = R.gpu_collectives(_facts(collective_ms=30.0, collective_overlap_pct=20.0))
    assert f.expected_speedup == pytest.approx(1 / (1 - 0.5 * 0.30 * 0.80))
    assert R.gpu_collectives(_facts(collective_ms=30.0, collective_overlap_pct=80.0)) is None
    assert R.gpu_collectives(_facts(collective_ms=5.0, collective_overlap_pct=0.0)) is None


def test_no_gpu_facts_no_gpu_finding():
    cpu = Facts(env={"device": "cpu"}, steps=[StepRecord(0, 10.0)])
    assert all(rule(cpu) is None for rule in (R.gpu_idle, R.gpu_syncs, R.gpu_pageable_copies,
                                              R.gpu_small_kernels, R.gpu_collectives))
