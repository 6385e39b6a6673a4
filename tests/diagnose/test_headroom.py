"""The headroom on hand-made facts: MFU, the bound's rule, the cap on the findings."""

from __future__ import annotations

import pytest

from torchboost.diagnose.headroom import cap_findings, headroom_of, limits_device, step_dtype
from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts, ModelFacts, ProfileFacts, StepRecord
from torchboost.limits.machine import MachineLimits, MatmulRate
from torchboost.techniques.precision.precision_diagnosis import PrecisionFacts

LIMITS = MachineLimits(key="k", device="cpu", name="Example CPU", threads=2,
                       matmul=[MatmulRate("fp32", 1024, 4.0e10), MatmulRate("fp32", 2048, 5.0e10),
                               MatmulRate("bf16", 2048, 2.0e11)])


def _facts(*, total_ms=100.0, data_ms=0.0, forward_ms=30.0, backward_ms=60.0, optimizer_ms=5.0,
           flops=1e9, **kw) -> Facts:
    steps = [StepRecord(i, total_ms, data_ms, forward_ms, backward_ms, optimizer_ms) for i in range(5)]
    return Facts(steps=steps, flops_per_step=flops, flops_by_op={"aten.mm": flops}, **kw)


def test_mfu_is_the_steps_flops_per_second_over_the_dtypes_peak():
    h = headroom_of(_facts(flops=1e9), LIMITS)  # 1e9 FLOPs in 100 ms: 10 GFLOP/s of a 50 GFLOP/s peak
    assert h.achieved_flops_per_s == pytest.approx(1e10)
    assert (h.dtype, h.peak_flops_per_s) == ("fp32", 5.0e10)
    assert h.mfu_pct == pytest.approx(20.0) and h.best_speedup == pytest.approx(5.0)
    assert h.line.startswith("This step runs at 20% of this machine's fp32 matmul peak; its bf16 peak is 4.0x higher")
    assert headroom_of(_facts(flops=1e9), FP32_ONLY).line.startswith(
        "This step runs at 20% of this machine's fp32 matmul peak; at most 5.0x is left")


def test_twin_an_autocast_bf16_step_is_measured_against_the_bf16_peak():
    facts = _facts(flops=1e9, techniques={"precision": PrecisionFacts(autocast=True, autocast_dtype="bfloat16")})
    h = headroom_of(facts, LIMITS)
    assert (h.dtype, h.mfu_pct) == ("bf16", pytest.approx(5.0))
    fp16 = headroom_of(_facts(techniques={"precision": PrecisionFacts(autocast=True, autocast_dtype="float16")}),
                       LIMITS)
    assert fp16.dtype == "fp16" and fp16.peak_flops_per_s == 5.0e10 and "no fp16 peak" in fp16.notes[0]


def test_parameters_in_bf16_make_a_bf16_step():
    assert step_dtype(_facts(model=ModelFacts(param_dtypes=["torch.bfloat16"]))) == "bf16"
    assert step_dtype(_facts(model=ModelFacts(param_dtypes=["torch.bfloat16", "torch.float32"]))) == "fp32"


@pytest.mark.parametrize("kw, bound", [
    (dict(data_ms=40.0, forward_ms=20.0, backward_ms=30.0), "data"),
    (dict(flops=4e9), "compute"),  # 4e9 FLOPs in 95 ms of phases: 84% of the peak
    (dict(forward_ms=20.0, backward_ms=30.0, optimizer_ms=5.0), "host"),  # 45 ms outside every phase
    (dict(profile=ProfileFacts(steps=1, top_ops=[
        {"name": "aten::mm", "self_cpu_ms": 20.0, "self_device_ms": 0.0, "calls": 3},
        {"name": "aten::add", "self_cpu_ms": 60.0, "self_device_ms": 0.0, "calls": 9}])), "memory"),
    (dict(profile=ProfileFacts(steps=1, top_ops=[  # the twin of memory: the matmuls are the time
        {"name": "aten::mm", "self_cpu_ms": 60.0, "self_device_ms": 0.0, "calls": 3},
        {"name": "aten::add", "self_cpu_ms": 20.0, "self_device_ms": 0.0, "calls": 9}])), "compute"),
])
def test_each_bound_comes_from_its_rule(kw, bound):
    assert headroom_of(_facts(**kw), LIMITS).bound == bound


def test_without_a_count_there_is_no_mfu_and_the_line_says_why():
    h = headroom_of(_facts(flops=None, flops_error="FlopCounterMode failed: boom"), LIMITS)
    assert h.mfu_pct is None and h.best_speedup is None
    assert "not known (FlopCounterMode failed: boom)" in h.line


def _finding(speedup: float, **kw) -> Finding:
    return Finding(id="data.workers", title="t", evidence={}, expected_speedup=speedup, formula="f", **kw)


def test_a_gain_above_the_headroom_is_capped_and_says_so():
    h = headroom_of(_facts(flops=2.5e9), LIMITS)  # 50% of the peak: at most 2x
    big, small, memory = cap_findings([_finding(3.0), _finding(1.5), _finding(0.8, memory_ratio=2.0)], h)
    assert big.expected_speedup == pytest.approx(2.0) and "capped at 2.00x (estimated 3.00x)" in big.notes[-1]
    assert small.expected_speedup == 1.5 and small.notes == []  # the twin: within the headroom, untouched
    assert memory.expected_speedup == 0.8


def test_no_headroom_leaves_the_findings_as_they_are():
    findings = [_finding(3.0)]
    assert cap_findings(findings, None) == findings
    assert cap_findings(findings, headroom_of(_facts(flops=None), LIMITS)) == findings


def test_a_data_bound_line_gives_the_replay_probes_measurement_and_a_tiny_mfu_its_digits():
    facts = _facts(data_ms=60.0, forward_ms=20.0, backward_ms=10.0, optimizer_ms=5.0, flops=1e6,
                   replay_step_ms=[25.0, 20.0, 30.0])
    h = headroom_of(facts, LIMITS)
    assert h.bound == "data" and "fed batches from memory, with no loader work, it ran 4.0x faster" in h.why
    assert h.line.startswith("This step runs at 0.02% of this machine's fp32 matmul peak")
    assert "fed batches from memory" not in headroom_of(_facts(data_ms=60.0), LIMITS).why  # the twin: no replay


FP32_ONLY = MachineLimits(key="k", device="cpu", name="Example CPU", threads=2,
                          matmul=[MatmulRate("fp32", 1024, 4.0e10), MatmulRate("fp32", 2048, 5.0e10)])


def test_the_headline_names_a_faster_dtype_and_what_it_leaves():
    h = headroom_of(_facts(flops=4e9), LIMITS)  # 40 GFLOP/s: 80% of fp32's 50, 20% of bf16's 200
    assert h.faster_dtype == "bf16" and h.best_speedup_in("bf16") == pytest.approx(5.0)
    assert h.line.startswith("This step runs at 80% of this machine's fp32 matmul peak; its bf16 peak is 4.0x "
                             "higher: 1.2x is left in fp32 compute, up to 5.0x in bf16.")
    assert "at most 1.2x" not in h.line


def test_twin_with_fp32_alone_the_headline_is_the_fp32_one():
    h = headroom_of(_facts(flops=4e9), FP32_ONLY)
    assert h.faster_dtype is None and h.best_speedup_in("bf16") == pytest.approx(1.25)
    assert h.line.startswith("This step runs at 80% of this machine's fp32 matmul peak; at most 1.2x is left in compute")


def test_a_step_already_in_the_fastest_dtype_names_no_other():
    facts = _facts(flops=1e9, techniques={"precision": PrecisionFacts(autocast=True, autocast_dtype="bfloat16")})
    assert headroom_of(facts, LIMITS).faster_dtype is None


def test_a_finding_that_moves_the_step_to_bf16_is_capped_at_the_bf16_peak():
    h = headroom_of(_facts(flops=4e9), LIMITS)
    to_bf16, same_dtype = cap_findings([_finding(1.9, dtype="bf16"), _finding(1.9)], h)
    assert to_bf16.expected_speedup == 1.9 and to_bf16.notes == []  # bf16's peak leaves 5x
    assert same_dtype.expected_speedup == pytest.approx(1.25) and "fp32 matmul peak" in same_dtype.notes[-1]
    capped, = cap_findings([_finding(9.0, dtype="bf16")], h)
    assert capped.expected_speedup == pytest.approx(5.0) and "measured bf16 matmul peak" in capped.notes[-1]


def test_twin_without_a_bf16_peak_a_bf16_finding_is_capped_as_before():
    h = headroom_of(_facts(flops=4e9), FP32_ONLY)
    capped, = cap_findings([_finding(1.9, dtype="bf16")], h)
    assert capped.expected_speedup == pytest.approx(1.25) and "measured fp32 matmul peak" in capped.notes[-1]


# -- a GPU's fp32 convolutions run in TF32 where cuDNN allows it (torch's default) ---------------

GPU = MachineLimits(key="k", device="cuda", name="Example GPU", threads=8,
                    matmul=[MatmulRate("fp32", 4096, 2.0e13), MatmulRate("tf32", 4096, 1.6e14),
                            MatmulRate("bf16", 4096, 3.2e14)])


def _conv_net(*, tf32_cudnn: bool = True, tf32_matmul: bool = False, mm: float = 0.0) -> Facts:
    """A conv net on a (fake) CUDA GPU: 4e12 FLOPs of convolutions a 100 ms step (40 TFLOP/s:
    twice the fp32 peak, a quarter of TF32's), plus ``mm`` FLOPs of fp32 matmuls."""
    steps = [StepRecord(i, 100.0, 0.0, 30.0, 60.0, 5.0) for i in range(5)]
    by_op = {"aten.convolution": 1.4e12, "aten.convolution_backward": 2.6e12, **({"aten.mm": mm} if mm else {})}
    return Facts(steps=steps, flops_per_step=4e12 + mm, flops_by_op=by_op,
                 model=ModelFacts(param_dtypes=["float32"], device="cuda:0", has_conv2d=True),
                 techniques={"precision": PrecisionFacts(tf32_matmul=tf32_matmul, tf32_cudnn=tf32_cudnn)})


def test_a_conv_net_whose_cudnn_allows_tf32_is_held_against_the_tf32_peak():
    h = headroom_of(_conv_net(), GPU)
    assert (h.dtype, h.peak_flops_per_s) == ("tf32", 1.6e14) and h.mfu_pct == pytest.approx(25.0)
    assert h.best_speedup == pytest.approx(4.0) and h.notes == ()


def test_twin_held_against_the_fp32_peak_it_reads_over_100_percent():
    h = headroom_of(_conv_net(tf32_cudnn=False), GPU)  # as every conv net was held before: 200%
    assert (h.dtype, h.mfu_pct, h.best_speedup) == ("fp32", None, None)
    assert any("would run at 211% of the measured peak" in n for n in h.notes)  # 4e12 in 95 ms of phases


def test_convolutions_in_tf32_beside_fp32_matmuls_are_each_held_against_their_own_peak():
    # 4e12 FLOPs of convolutions at 1.6e14 (25 ms) and 1e12 of matmuls at 2e13 (50 ms): 5e12 in 75 ms
    h = headroom_of(_conv_net(mm=1e12), GPU)
    assert h.dtype == "tf32" and h.peak_flops_per_s == pytest.approx(5e12 / 0.075)
    assert h.mfu_pct == pytest.approx(100.0 * 5e13 / (5e12 / 0.075))
    assert h.notes == ("the matmuls (20% of the FLOPs) are held against the fp32 peak (TF32 is off for them), "
                       "the rest against the tf32 peak",)
    moved, = cap_findings([_finding(9.0, dtype="tf32")], h)  # TF32 in the matmuls too: the TF32 peak's cap
    assert moved.expected_speedup == pytest.approx(1.6e14 / 5e13)


def test_on_the_roofline_each_op_has_its_own_dtype_s_roof():
    facts = _conv_net(mm=1e12)
    facts.profile = ProfileFacts(steps=1, top_ops=[
        {"name": name, "self_cpu_ms": 1.0, "self_device_ms": ms, "calls": 1}
        for name, ms in (("aten::convolution", 20.0), ("aten::convolution_backward", 40.0), ("aten::mm", 30.0))])
    roofs = {r.name: r.roof_flops_per_s for r in headroom_of(facts, GPU).ops}
    assert roofs == {"aten::convolution": 1.6e14, "aten::convolution_backward": 1.6e14, "aten::mm": 2.0e13}


def test_with_cublas_s_tf32_on_too_every_op_is_held_against_the_tf32_peak():
    h = headroom_of(_conv_net(mm=1e12, tf32_matmul=True), GPU)
    assert (h.dtype, h.peak_flops_per_s, h.notes) == ("tf32", 1.6e14, ())


def test_twin_a_cpu_conv_net_is_held_against_the_fp32_peak_whatever_cudnn_says():
    facts = _conv_net()
    facts.model.device = "cpu"
    assert step_dtype(facts) == "fp32"


@pytest.mark.gpu
def test_gpu_a_tiny_cuda_conv_net_counted_and_probed_for_real_is_held_against_the_tf32_peak():
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from torchboost.techniques.precision.precision_diagnosis import probe_precision
    from torchboost.techniques.registry import ProbeContext

    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("this GPU has no TF32 (before Ampere)")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3),
                              torch.nn.Flatten(), torch.nn.Linear(16 * 12 * 12, 10)).cuda()
    from torchboost import _fp32_precision

    saved = [_fp32_precision.set_tf32(True, matmul=False), _fp32_precision.set_tf32(False, cudnn=False)]
    try:  # torch's defaults, whatever ran before: cuDNN's TF32 on, cuBLAS's off
        with FlopCounterMode(display=False) as counter:
            net(torch.randn(8, 3, 16, 16, device="cuda")).sum().backward()
        seen = probe_precision(ProbeContext(model=net, optimizer=None, loader=None, device="cuda"))
    finally:
        for one in reversed(saved):
            one.restore()
    by_op = {str(op): int(n) for op, n in counter.get_flop_counts()["Global"].items()}
    steps = [StepRecord(i, 10.0, 0.0, 3.0, 6.0, 1.0) for i in range(5)]
    facts = Facts(steps=steps, flops_per_step=int(counter.get_total_flops()), flops_by_op=by_op,
                  model=ModelFacts(param_dtypes=["float32"], device="cuda:0", has_conv2d=True),
                  techniques={"precision": seen})
    assert {"aten.convolution", "aten.convolution_backward"} <= set(by_op)  # the names the roof reads
    assert seen.tf32_cudnn and not seen.tf32_matmul  # read back from the real switches
    h = headroom_of(facts, GPU)
    assert h.dtype == "tf32" and "matmuls" in h.notes[0] and "against the fp32 peak" in h.notes[0]


def test_an_mps_step_is_held_against_no_peak_and_the_line_says_it_is_unknown():
    facts = _facts(flops=1e9, model=ModelFacts(device="mps:0"))
    assert limits_device(facts) is None
    h = headroom_of(facts, None)
    assert (h.mfu_pct, h.best_speedup, h.peak_flops_per_s) == (None, None, None)
    assert h.line.startswith("The step's FLOPs against this machine's peak: not known (the step runs on mps:0, whose "
                             "peak the probe does not measure; it is not held against the CPU's)")
    assert cap_findings([_finding(9.0)], h)[0].expected_speedup == 9.0  # nothing capped by an unknown peak


def test_twin_a_cpu_and_a_cuda_step_are_held_against_their_own_probe():
    assert limits_device(_facts(model=ModelFacts(device="cpu"))) == "cpu"
    assert limits_device(_facts(model=ModelFacts(device="cuda:1"))) == "cuda"
    assert headroom_of(_facts(flops=1e9, model=ModelFacts(device="cpu")), LIMITS).mfu_pct == pytest.approx(20.0)


@pytest.mark.parametrize("flops, mfu", [(8e9, None), (5e9, None), (4e9, 80.0)])
def test_flops_no_step_could_run_in_the_median_step_give_no_mfu(flops, mfu):
    # A script that evaluates 2,048 samples with gradients on every 5th step: the counted step
    # held the evaluation, the median step did not, and the doctor printed "135% of this
    # machine's fp32 matmul peak", or 69% with its phases "at 121% of the peak". 8e9 FLOPs in
    # a 100 ms median step would be 160% of the 50 GFLOP/s peak, 5e9 in its 95 ms of phases
    # 105%: no MFU, no cap, a note why, and the bound not read from them. Twin: 4e9 is 80%.
    h = headroom_of(_facts(flops=flops), LIMITS)
    assert h.mfu_pct == (pytest.approx(mfu) if mfu else None)
    assert any("no MFU is given" in n for n in h.notes) is (mfu is None)
    assert (h.best_speedup is None) is (mfu is None)
    assert ("of the peak" in h.why) is (mfu is not None)  # the bound's rule read no FLOPs that cannot be
    assert h.line.startswith("This step runs at") is (mfu is not None)
