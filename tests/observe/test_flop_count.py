"""One step's FLOPs: counted in the profiler's warm-up step, never in a recorded one, and
end to end on 3 x Linear(1024, 1024) at batch 256 (4.29e9 FLOPs per step)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from torchboost.cli import main
from torchboost.observe import ObserveSpec, StepRecorder, StopObserving
from torchboost.observe.record.recorder import BACKWARD, FORWARD

SCRIPT = Path(__file__).parents[1] / "scripts" / "linear_flops.py"
BATCH, WIDTH, LAYERS = 256, 1024, 3
EXACT = 2 * BATCH * WIDTH * WIDTH * (LAYERS + LAYERS + LAYERS - 1)
"""One matmul is 2 x 256 x 1024 x 1024 FLOPs; a step has 3 in the forward, 3 weight
gradients and 2 input gradients (the first layer's input needs none): 4294967296."""


def _within_5pct(count: float | None, exact: float) -> bool:
    return count is not None and abs(count - exact) <= 0.05 * exact


def _size_step(rec: StepRecorder, size: int) -> None:
    """A step whose FLOPs say which step it was: one size x size matmul forward, its backward."""
    a = torch.ones(size, size, requires_grad=True)
    rec.phase_begin(FORWARD)
    out = (a @ a).sum()
    rec.phase_end(FORWARD, 0.0)
    rec.phase_begin(BACKWARD)
    out.backward()
    rec.phase_end(BACKWARD, 0.0)
    rec.backward_done()


def _counted_size(tmp_path, profile_warmup: int) -> int | None:
    spec = ObserveSpec(out_dir=str(tmp_path), steps=3, warmup=1, profile_warmup=profile_warmup, profile_active=1)
    rec = StepRecorder(spec)
    sizes = iter(range(8, 200, 8))
    with pytest.raises(StopObserving):
        for size in sizes:
            _size_step(rec, size)
    flops = rec.facts().flops_per_step
    # a size x size matmul forward and its two gradient matmuls backward: 3 x 2 x size**3
    return None if flops is None else round((flops / 6) ** (1 / 3))


def test_the_counted_step_is_the_profilers_warm_up_step_after_the_recorded_ones(tmp_path):
    # steps of size 8, 16, 24...: warm-up 1 (8), recorded 3 (16, 24, 32), then the profiler's warm-up (40)
    assert _counted_size(tmp_path, profile_warmup=1) == 40


def test_twin_without_a_profiler_warm_up_step_no_step_is_counted(tmp_path):
    # the only step left would be a profiled one: its op times must not carry the counter's cost
    assert _counted_size(tmp_path, profile_warmup=0) is None


def test_forward_only_counting_fails_the_check_that_the_step_passes():
    model = torch.nn.Sequential(*(torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))
    x = torch.randn(BATCH, WIDTH)
    with FlopCounterMode(display=False) as whole:
        model(x).sum().backward()
    with FlopCounterMode(display=False) as forward_only:  # the broken twin
        out = model(x).sum()
    out.backward()
    assert _within_5pct(whole.get_total_flops(), EXACT)
    assert not _within_5pct(forward_only.get_total_flops(), EXACT)


PEAK_FLOPS_PER_S = 1e14
"""The machine's fp32 peak the doctor is handed: 100 TFLOP/s, above any CPU's, so no step
can run above it, whatever else the machine runs meanwhile."""
BANDWIDTH_BYTES_PER_S = 1e13
"""Its bandwidth: a ridge at 10 FLOP per byte, left of the matmuls' 85."""


def _fixed_limits(device: str, threads: int | None = None, **_kw):
    from torchboost.limits.machine import MachineLimits, MatmulRate

    return MachineLimits(key="fixed", device=device, name="a fixed machine", threads=threads or 1,
                         matmul=[MatmulRate("fp32", 1024, PEAK_FLOPS_PER_S, 1.0)],
                         bandwidth_bytes_per_s=BANDWIDTH_BYTES_PER_S), True


def assert_mfu_said(headroom: dict) -> None:
    """The step's MFU is its achieved rate over the peak, at most 100%, and the line says it."""
    mfu = headroom["mfu_pct"]
    assert 0 < mfu <= 100, mfu
    assert mfu == pytest.approx(100 * headroom["achieved_flops_per_s"] / headroom["peak_flops_per_s"])
    assert headroom["dtype"] == "fp32" and headroom["best_speedup"] == pytest.approx(max(1.0, 100 / mfu))
    assert headroom["line"].startswith("This step runs at ") and "% of this machine's fp32" in headroom["line"]
    assert f"{max(1.0, 100 / mfu):.1f}x is left in" in headroom["line"]


def test_twin_a_step_said_to_run_above_the_peak_fails_the_check():
    over = {"mfu_pct": 150.0, "achieved_flops_per_s": 1.5e11, "peak_flops_per_s": 1e11, "dtype": "fp32",
            "best_speedup": 1.0, "line": "This step runs at 150% of this machine's fp32 peak: nothing is left in compute"}
    with pytest.raises(AssertionError):
        assert_mfu_said(over)


@pytest.mark.slow
def test_doctor_counts_the_step_and_its_mfu_is_a_share_of_the_machines_peak(tmp_path, monkeypatch, capsys):
    from torchboost.diagnose import headroom as headroom_module

    monkeypatch.setattr(headroom_module, "machine_limits", _fixed_limits)  # the probe is tested on its own
    out = tmp_path / "doctor"
    code = main(["doctor", "--steps", "3", "--warmup", "1", "--out", str(out), "--json",
                 "--", sys.executable, str(SCRIPT)])
    assert code == 0, capsys.readouterr().err
    headroom = json.loads((out / "report.json").read_text())["headroom"]
    assert _within_5pct(headroom["flops_per_step"], EXACT)
    assert not _within_5pct(headroom["flops_per_step"] * LAYERS / (3 * LAYERS - 1), EXACT)  # forward's share alone
    assert headroom["peak_flops_per_s"] == PEAK_FLOPS_PER_S
    assert_mfu_said(headroom)
    # the roofline: the matmuls (85 FLOP per byte) are right of the machine's ridge, compute-bound
    matmuls = [op for op in headroom["ops"] if op["name"] in ("aten::addmm", "aten::mm")]
    assert matmuls and all(op["bound"] == "compute" and op["bytes"] > 0 and 0 < op["pct_of_roof"] for op in matmuls)
    ridge = headroom["peak_flops_per_s"] / headroom["machine"]["bandwidth_bytes_per_s"]
    assert all(op["intensity"] > ridge for op in matmuls)
    assert 'id="plot-roofline"' in (out / "report.html").read_text()


def _attention_step(counter) -> None:
    q, k, v = (torch.randn(2, 4, 32, 16, requires_grad=True) for _ in range(3))
    counter.start()
    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    counter.stop()


def test_cpu_attention_counts_the_sdpa_formulas_forward_and_backward():
    from torchboost.observe.probes.flop_count import StepFlops

    counter = StepFlops()
    _attention_step(counter)
    forward = 4 * 2 * 4 * 32 * 32 * 16  # two matmuls: q @ k^T and p @ v
    assert counter.error is None
    assert counter.by_op["aten._scaled_dot_product_flash_attention_for_cpu"] == forward
    assert counter.by_op["aten._scaled_dot_product_flash_attention_for_cpu_backward"] == forward * 5 // 2
    assert counter.flops == forward * 7 // 2


def test_twin_torchs_counter_alone_counts_no_cpu_attention(monkeypatch):
    from torchboost.observe.probes import flop_count

    monkeypatch.setattr(flop_count, "cpu_attention_formulas", dict)
    counter = flop_count.StepFlops()
    _attention_step(counter)
    assert counter.flops == 0  # what the doctor reported for a CPU transformer's attention
