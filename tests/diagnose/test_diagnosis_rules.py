"""Each rule on hand-made Facts: fires when it should, not when the fix is on, not below threshold."""

from __future__ import annotations

import pytest

from _diagnose_helpers import GIB, check_finding, make_facts, profile, steps, with_
from torchboost.frameworks import fix_toml, fix_torch
from torchboost.diagnose import diagnose
from _diagnose_helpers import R

DATA_BOUND = dict(data=60.0, forward=20.0, backward=15.0, optimizer=3.0, other=2.0)
CONV = {"has_conv2d": True, "channels_last": False}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_healthy_run_has_no_finding(device):
    assert diagnose(make_facts(device)) == []


# data.workers ---------------------------------------------------------------------------

def test_data_workers_fires_on_data_bound_main_process_loading():
    facts = with_(make_facts(**DATA_BOUND), loader={"num_workers": 0})
    f = check_finding(R.data_workers(facts), "data.workers")
    # T=100, D=60, C=40, w=2 on 8 CPU cores: max(40, 60/2) = 40 -> 2.5x.
    assert f.expected_speedup == pytest.approx(2.5)
    assert f.evidence["num_workers"] == 0 and f.evidence["suggested_num_workers"] == 2
    assert f.evidence["data_wait_pct"] == pytest.approx(60.0)
    assert "num_workers = 2" in fix_toml(f) and "num_workers=2" in fix_torch(f)


def test_data_workers_on_cuda_raises_existing_workers_towards_the_cores():
    facts = with_(make_facts("cuda", cores=16, **DATA_BOUND), loader={"num_workers": 2})
    f = check_finding(R.data_workers(facts), "data.workers")
    assert f.evidence["suggested_num_workers"] == 8
    # P = 2 workers x 100 ms; max(40, 200/8) = 40 -> 2.5x.
    assert f.expected_speedup == pytest.approx(2.5)


def test_data_workers_not_when_workers_already_enough_or_below_threshold():
    assert R.data_workers(make_facts(**DATA_BOUND)) is None  # 2 workers on 8 CPU cores already
    low = with_(make_facts(), loader={"num_workers": 0})  # data is 10% of the step
    assert R.data_workers(low) is None
    assert R.data_workers(low, data_wait_pct=5.0) is not None
    single = with_(make_facts(cores=1, **DATA_BOUND), loader={"num_workers": 0})
    assert R.data_workers(single) is None


def test_data_workers_on_iterable_says_to_shard():
    facts = with_(make_facts(**DATA_BOUND), loader={"num_workers": 0, "iterable": True, "num_batches": None})
    f = check_finding(R.data_workers(facts), "data.workers")
    assert f.evidence["dataset"] == "iterable"
    assert any("get_worker_info" in n for n in f.notes)


# data.pin_memory ------------------------------------------------------------------------

def _h2d(ms_total):
    return profile(ops=[("Memcpy HtoD (Pageable -> Device)", 0.0, ms_total)], steps_profiled=5)


def test_pin_memory_fires_on_profiled_pageable_copies():
    facts = with_(make_facts("cuda"), loader={"pin_memory": False}, profile=_h2d(50.0))
    f = check_finding(R.data_pin_memory(facts), "data.pin_memory")
    assert f.evidence["h2d_copy_ms_per_step"] == pytest.approx(10.0)
    assert f.expected_speedup == pytest.approx(1 / (1 - 0.1 + 0.1 / 2))
    assert "pin_memory=True" in fix_torch(f) and "non_blocking=True" in fix_torch(f)


def test_pin_memory_without_profile_falls_back_on_the_data_wait():
    facts = with_(make_facts("cuda", **DATA_BOUND), loader={"pin_memory": False})
    f = check_finding(R.data_pin_memory(facts), "data.pin_memory")
    assert any("not profiled" in n for n in f.notes)
    assert R.data_pin_memory(with_(make_facts("cuda"), loader={"pin_memory": False})) is None


def test_pin_memory_not_when_pinned_on_cpu_or_small_copy():
    assert R.data_pin_memory(with_(make_facts("cuda"), profile=_h2d(50.0))) is None  # already pinned
    cpu = with_(make_facts("cpu"), loader={"pin_memory": False}, profile=_h2d(50.0))
    assert R.data_pin_memory(cpu) is None
    small = with_(make_facts("cuda"), loader={"pin_memory": False}, profile=_h2d(2.5))  # 0.5% of the step
    assert R.data_pin_memory(small) is None


# data.persistent_workers ----------------------------------------------------------------

def _epochs(restart_ms):
    recs = steps(12)
    for rec in recs:
        if rec.index % 5 == 0:  # first batch of each 5-batch epoch waits for worker start-up
            rec.data_ms += restart_ms
            rec.total_ms += restart_ms
    return recs


def test_persistent_workers_fires_on_epoch_start_spikes():
    facts = with_(make_facts(), loader={"persistent_workers": False, "num_batches": 5}, steps=_epochs(300.0))
    f = check_finding(R.data_persistent_workers(facts), "data.persistent_workers")
    assert f.evidence["restart_ms"] == pytest.approx(300.0)
    assert f.expected_speedup == pytest.approx((5 * 100 + 300) / (5 * 100))


def test_persistent_workers_not_when_on_single_epoch_no_workers_or_small():
    base = with_(make_facts(), loader={"persistent_workers": False, "num_batches": 5}, steps=_epochs(300.0))
    assert R.data_persistent_workers(with_(base, loader={"persistent_workers": True})) is None
    assert R.data_persistent_workers(with_(base, loader={"num_workers": 0})) is None
    assert R.data_persistent_workers(with_(base, planned_steps=5)) is None
    small = with_(base, steps=_epochs(2.0))  # 2 ms per 500 ms epoch = 0.4%
    assert R.data_persistent_workers(small) is None
    assert R.data_persistent_workers(small, worker_restart_pct=0.1) is not None


# precision.lower / precision.slower_on_cpu ----------------------------------------------

def _fp32(facts):
    return with_(facts, precision={"autocast": False, "autocast_dtype": None})


def test_precision_lower_on_cpu_with_bf16_instructions_assumed_factor():
    f = check_finding(R.precision_lower(_fp32(make_facts(cpu_bf16=True))), "precision.lower")
    assert f.expected_speedup == pytest.approx(1 / (0.2 + 0.8 / 1.3))
    assert 'mode = "bf16"' in fix_toml(f) and "torch.bfloat16" in fix_torch(f)
    assert any("not measured" in n for n in f.notes)


def test_precision_lower_measurement_decides_on_cpu():
    measured = R.precision_lower(with_(_fp32(make_facts(cpu_bf16=False)), cpu_bf16_speedup=2.0))
    assert check_finding(measured, "precision.lower").expected_speedup == pytest.approx(1 / (0.2 + 0.8 / 2))
    assert measured.evidence["cpu_bf16_speedup"] == 2.0
    # Flags say bf16, the measurement says slower: no recommendation.
    assert R.precision_lower(with_(_fp32(make_facts(cpu_bf16=True)), cpu_bf16_speedup=0.8)) is None


def test_precision_lower_weights_cpu_factor_by_matmul_share():
    facts = with_(_fp32(make_facts()), cpu_bf16_speedup=2.0,
                  profile=profile(ops=[("aten::addmm", 50.0, 0.0), ("aten::relu", 50.0, 0.0)]))
    f = check_finding(R.precision_lower(facts), "precision.lower")
    s = 1 / (0.5 + 0.5 / 2)
    assert f.expected_speedup == pytest.approx(1 / (0.2 + 0.8 / s))


def test_precision_lower_not_on_cpu_without_bf16_when_on_or_below_threshold():
    assert R.precision_lower(_fp32(make_facts(cpu_bf16=False))) is None
    assert R.precision_lower(make_facts()) is None  # bf16 autocast already on
    half = with_(_fp32(make_facts()), model={"param_dtypes": ["torch.bfloat16"]})
    assert R.precision_lower(half) is None
    light = _fp32(make_facts(data=50.0, forward=20.0, backward=20.0))  # compute 40%
    assert R.precision_lower(light) is None
    assert R.precision_lower(light, compute_pct=30.0) is not None


def test_precision_lower_on_cuda_picks_fp16_with_scaler_without_bf16():
    f = check_finding(R.precision_lower(_fp32(make_facts("cuda", cuda_bf16=False))), "precision.lower")
    assert 'mode = "fp16"' in fix_toml(f) and "GradScaler" in fix_torch(f)
    tf32 = R.precision_lower(with_(_fp32(make_facts("cuda")), precision={"tf32_matmul": True}))
    assert tf32.expected_speedup == pytest.approx(1 / (0.2 + 0.8 / 1.3))
    assert f.expected_speedup > tf32.expected_speedup


def test_bf16_on_cpu_without_bf16_is_slower_and_not_lowered():
    facts = make_facts(cpu_bf16=False)  # bf16 autocast on
    ids = [f.id for f in diagnose(facts)]
    assert "precision.slower_on_cpu" in ids and "precision.lower" not in ids
    f = check_finding(R.precision_slower_on_cpu(facts), "precision.slower_on_cpu")
    assert f.expected_speedup == pytest.approx(1 / (0.2 + 0.8 * 0.5))
    assert 'mode = "fp32"' in fix_toml(f)


def test_precision_slower_on_cpu_measurement_decides():
    slow = with_(make_facts(cpu_bf16=True), cpu_bf16_speedup=0.6)
    f = check_finding(R.precision_slower_on_cpu(slow), "precision.slower_on_cpu")
    assert f.expected_speedup == pytest.approx(1 / (0.2 + 0.8 * 0.6))
    assert R.precision_slower_on_cpu(with_(make_facts(cpu_bf16=False), cpu_bf16_speedup=1.5)) is None


def test_precision_slower_on_cpu_not_when_fp32_on_bf16_cpu_or_on_cuda():
    assert R.precision_slower_on_cpu(_fp32(make_facts(cpu_bf16=False))) is None
    assert R.precision_slower_on_cpu(make_facts(cpu_bf16=True)) is None
    assert R.precision_slower_on_cpu(make_facts("cuda", cpu_bf16=False)) is None
    fp16 = with_(make_facts(cpu_bf16=False), precision={"autocast_dtype": "float16"})
    assert check_finding(R.precision_slower_on_cpu(fp16), "precision.slower_on_cpu").evidence["autocast_dtype"] == "float16"


# compile.enable -------------------------------------------------------------------------

def _eager(facts, **model):
    return with_(facts, model={"compiled": False, **model})


def test_compile_fires_when_compute_dominates_and_mentions_cost():
    from torchboost.techniques.compile.compile_diagnosis import cpu_estimate

    f = check_finding(R.compile_enable(_eager(make_facts())), "compile.enable")
    # On a CPU the gain is an estimate from the gains recorded on CPUs, ranked by their median,
    # worded as one with its arithmetic and its source: never as measured in this run.
    assert f.expected_speedup == cpu_estimate()[1] == 1.04
    assert f.formula.startswith("estimate, not measured here: median(0.83, 0.85, 0.96, 1.04, 1.05, 1.06, 1.21) = 1.040")
    assert "benchmarks/RESULTS.md" in f.formula and "from 0.83x to 1.21x a step" in f.formula
    gpu = check_finding(R.compile_enable(_eager(make_facts("cuda"))), "compile.enable")  # twin: a GPU's estimate
    assert gpu.expected_speedup == pytest.approx(1 / (0.2 + 0.8 / 1.3)) and "estimate: 1 / (1 - f + f / s)" in gpu.formula
    assert f.evidence["break_even_steps"] > 0
    assert any("compile costs" in n for n in f.notes)
    assert fix_torch(f) == "model = torch.compile(model)"
    big = R.compile_enable(_eager(make_facts(), parameters=300_000_000))
    assert 'scope = "regional"' in fix_toml(big)


def test_compile_not_when_compiled_impossible_short_or_light():
    assert R.compile_enable(make_facts()) is None  # already compiled
    assert R.compile_enable(_eager(make_facts(can_compile=False))) is None
    assert R.compile_enable(with_(_eager(make_facts()), planned_steps=50)) is None  # cannot pay back
    assert R.compile_enable(with_(_eager(make_facts()), planned_steps=100_000)) is not None
    light = _eager(make_facts(data=50.0, forward=20.0, backward=20.0))
    assert R.compile_enable(light) is None


# sync.host_device -----------------------------------------------------------------------

def test_sync_fires_with_profiled_blocking_time():
    prof = profile(sync=3.0, ops=[("cudaStreamSynchronize", 25.0, 0.0)],
                   sync_ops={"aten::_local_scalar_dense": 15})
    f = check_finding(R.sync_host_device(with_(make_facts("cuda"), profile=prof)), "sync.host_device")
    # Blocked 5 ms/step, host work 15 ms/step (data 10 + other 5): 5 ms can overlap.
    assert f.expected_speedup == pytest.approx(100 / 95)
    assert "aten::_local_scalar_dense" in f.evidence["sync_ops"]


def test_sync_without_timing_uses_small_assumed_gap():
    f = check_finding(R.sync_host_device(with_(make_facts("cuda"), profile=profile(sync=20.0))), "sync.host_device")
    assert f.expected_speedup == pytest.approx(100 / (100 - 20 * 0.05))


def test_sync_not_on_cpu_or_below_threshold():
    assert R.sync_host_device(with_(make_facts("cpu"), profile=profile(sync=20.0))) is None
    assert R.sync_host_device(with_(make_facts("cuda"), profile=profile(sync=0.5))) is None
    assert R.sync_host_device(with_(make_facts("cuda"), profile=profile(sync=3.0)), sync_per_step=5.0) is None


# optimizer.fused ------------------------------------------------------------------------

def test_fused_optimizer_fires_against_for_loop_on_cpu_and_foreach_on_cuda():
    slow_opt = dict(optimizer=20.0, forward=25.0)
    f = check_finding(R.optimizer_fused(with_(make_facts(**slow_opt), optimizer={"fused": None})), "optimizer.fused")
    assert f.expected_speedup == pytest.approx(1 / (0.8 + 0.2 / 3.0))
    assert f.evidence["implementation"] == "for-loop" and "fused=True" in fix_torch(f)
    g = R.optimizer_fused(with_(make_facts("cuda", **slow_opt), optimizer={"fused": False}))
    assert g.expected_speedup == pytest.approx(1 / (0.8 + 0.2 / 1.5))


def test_fused_optimizer_not_when_fused_unsupported_or_small():
    assert R.optimizer_fused(make_facts(optimizer=20.0, forward=25.0)) is None  # fused already
    unsupported = with_(make_facts(optimizer=20.0, forward=25.0), optimizer={"fused": None, "supports_fused": False})
    assert R.optimizer_fused(unsupported) is None
    small = with_(make_facts(optimizer=2.0, other=8.0), optimizer={"fused": None})
    assert R.optimizer_fused(small) is None


def test_fused_optimizer_under_its_share_fires_when_its_quick_switch_measured_it_faster():
    """A busy machine can shrink the optimizer's share under the threshold while the fused
    step measured faster in every pair: the measurement keeps the finding. Twins: pairs on
    both sides of 1, or a probe that failed, leave it silent."""
    from torchboost.evidence.quick_probe import QuickProbeFacts

    small = with_(make_facts(optimizer=2.0, other=8.0), optimizer={"fused": None})

    def probed(plain, switched, error=None):
        return with_(small, quick_probes=[QuickProbeFacts("optimizer.fused", "fused Adam", plain, switched, error=error)])

    f = check_finding(R.optimizer_fused(probed([10.0, 11.0, 10.5], [8.0, 9.0, 8.5])), "optimizer.fused")
    assert f.evidence["optimizer_pct"] == pytest.approx(2.0)
    assert R.optimizer_fused(probed([10.0, 11.0, 10.5], [8.0, 12.0, 8.5])) is None  # one pair slower
    assert R.optimizer_fused(probed([], [], error="was not run")) is None


# memory.headroom ------------------------------------------------------------------------

def test_headroom_on_cuda_suggests_a_larger_batch():
    facts = with_(make_facts("cuda"), peak_memory_bytes=10 * GIB)
    f = check_finding(R.memory_headroom(facts), "memory.headroom")
    # k=4 (40 GiB <= 80% of 80 GiB); fixed 10 ms of 100 spread over 4x the samples.
    assert f.evidence["batch_factor"] == 4 and "batch_size=128" in fix_torch(f)
    assert f.expected_speedup == pytest.approx(100 / (90 + 10 / 4))


def test_headroom_without_accumulation_is_marked_as_changing_training_per_sample():
    f = check_finding(R.memory_headroom(with_(make_facts("cuda"), peak_memory_bytes=10 * GIB)), "memory.headroom")
    assert f.changes_training is True and f.unit == "sample"
    assert "per sample" in f.title and "time per sample" in f.formula


def test_headroom_under_accumulation_proposes_the_neutral_form():
    # 8 micro-steps per optimizer step, room for 4x: micro-batch x4, accumulation 8 -> 2.
    facts = with_(make_facts("cuda"), peak_memory_bytes=10 * GIB, micro_steps_per_step=8.0, uses_booster=True)
    f = check_finding(R.memory_headroom(facts), "memory.headroom")
    assert f.changes_training is False and f.unit == "step"
    assert "steps = 2" in fix_toml(f) and "batch_size=128" in fix_toml(f)
    other = f.evidence["other_ms_per_step"]
    assert f.expected_speedup == pytest.approx(100 / (100 - other + other / 4), rel=1e-3)


def test_headroom_neutral_form_needs_a_factor_that_divides_the_micro_steps():
    facts = with_(make_facts("cuda"), peak_memory_bytes=10 * GIB, micro_steps_per_step=3.0)
    assert R.memory_headroom(facts) is None  # 3 micro-steps: no power of two divides them


def test_headroom_on_cpu_uses_rss_and_ram():
    f = check_finding(R.memory_headroom(with_(make_facts(), peak_rss_bytes=4 * GIB)), "memory.headroom")
    assert f.evidence["memory_total_bytes"] == 64 * GIB and f.evidence["batch_factor"] == 8


def test_headroom_not_when_memory_used_or_unknown():
    assert R.memory_headroom(make_facts("cuda")) is None  # 75% used
    assert R.memory_headroom(with_(make_facts("cuda"), peak_memory_bytes=0)) is None
    assert R.memory_headroom(with_(make_facts("cuda"), peak_memory_bytes=10 * GIB), memory_used_pct=10.0) is None


# threads.oversubscribed -----------------------------------------------------------------

def test_threads_oversubscribed_on_cpu():
    facts = with_(make_facts(cores=8), cpu_threads=8)  # 8 threads + 2 workers on 8 cores
    f = check_finding(R.threads_oversubscribed(facts), "threads.oversubscribed")
    assert "threads = 6" in fix_toml(f) and f.evidence["oversubscription_ratio"] == 1.25
    assert f.expected_speedup == pytest.approx(1 / (0.15 + 0.85 / 1.25))


def test_threads_oversubscribed_trims_workers_when_they_alone_fill_the_cores():
    facts = with_(make_facts(cores=2), cpu_threads=2)  # 2 threads + 2 workers on 2 cores
    f = check_finding(R.threads_oversubscribed(facts), "threads.oversubscribed")
    assert "num_workers = 1" in fix_toml(f) and "threads = 1" in fix_toml(f)


def test_threads_not_when_balanced_or_on_cuda():
    assert R.threads_oversubscribed(make_facts(cores=8)) is None  # 6 + 2 = 8
    assert R.threads_oversubscribed(with_(make_facts("cuda", cores=8), cpu_threads=8)) is None
    assert R.threads_oversubscribed(with_(make_facts(cores=8), cpu_threads=8), oversubscription_ratio=1.5) is None


# cudnn.benchmark / memory.channels_last -------------------------------------------------

def test_cudnn_benchmark_on_cuda_conv():
    facts = with_(make_facts("cuda"), model=CONV, precision={"cudnn_benchmark": False})
    f = check_finding(R.cudnn_benchmark(facts), "cudnn.benchmark")
    assert fix_torch(f) == "torch.backends.cudnn.benchmark = True"
    assert R.cudnn_benchmark(with_(make_facts("cuda"), model=CONV)) is None  # already on
    assert R.cudnn_benchmark(with_(make_facts("cpu"), model=CONV, precision={"cudnn_benchmark": False})) is None
    assert R.cudnn_benchmark(with_(make_facts("cuda"), precision={"cudnn_benchmark": False})) is None  # no conv
    light = with_(make_facts("cuda", data=60.0, forward=15.0, backward=15.0), model=CONV,
                  precision={"cudnn_benchmark": False})
    assert R.cudnn_benchmark(light) is None


def test_channels_last_on_cuda_conv_in_reduced_precision():
    f = check_finding(R.memory_channels_last(with_(make_facts("cuda"), model=CONV)), "memory.channels_last")
    assert "channels_last = true" in fix_toml(f)
    assert R.memory_channels_last(with_(make_facts("cuda"), model={**CONV, "channels_last": True})) is None
    assert R.memory_channels_last(_fp32(with_(make_facts("cuda"), model=CONV))) is None  # fp32: no tensor cores
    assert R.memory_channels_last(with_(make_facts("cpu"), model=CONV)) is None
    light = with_(make_facts("cuda", data=60.0, forward=15.0, backward=15.0), model=CONV)
    assert R.memory_channels_last(light) is None


def test_headroom_without_a_loader_says_where_to_change_the_batch():
    facts = with_(make_facts("cuda"), peak_memory_bytes=10 * GIB, loader=None)
    f = check_finding(R.memory_headroom(facts), "memory.headroom")
    assert "batch_size" not in f.evidence and "4x larger" in fix_torch(f)
