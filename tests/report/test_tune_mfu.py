"""tune's report gives MFU before and after: the diagnosed step's FLOPs over each time per
step, against the probe's peak; without a FLOP count or a peak it says nothing."""

from __future__ import annotations

import dataclasses
import html
import json

import pytest
from rich.console import Console

from test_tune_report import _config_file, mixed_run
from torchboost.report.tune_report import print_tune_report, write_tune_report
from torchboost.tune.report_data import tune_summary


def _written(tmp_path, run):
    summary = tune_summary(run, config_path=_config_file(tmp_path, run))
    paths = write_tune_report(summary, tmp_path / "tune")
    report = json.loads(paths["json"].read_text())
    console = Console(record=True, width=250)
    print_tune_report(summary, console, paths)
    return report, paths, console.export_text()


def test_mfu_before_and_after_is_the_steps_flops_over_each_time(tmp_path):
    run = mixed_run()  # 84 ms per step before, workers kept: 62 ms after
    run = dataclasses.replace(run, facts=dataclasses.replace(run.facts, flops_per_step=840_000_000),
                              peak_flops_per_s=1.0e11, peak_dtype="fp32")
    report, paths, terminal = _written(tmp_path, run)
    mfu = report["mfu"]
    before, after = report["before"]["ms_per_step"], report["after"]["ms_per_step"]
    assert mfu["before_pct"] == pytest.approx(100 * 8.4e8 / (before / 1000) / 1e11)
    assert mfu["after_pct"] == pytest.approx(100 * 8.4e8 / (after / 1000) / 1e11)
    assert mfu["after_pct"] > mfu["before_pct"]  # faster is a larger share of the same peak
    line = f"MFU: {mfu['before_pct']:.0f}% before, {mfu['after_pct']:.0f}% after, of this machine's fp32 matmul peak"
    assert line in terminal
    assert line in paths["md"].read_text()
    assert line in html.unescape(paths["html"].read_text())


def test_twin_without_a_flop_count_there_is_no_mfu(tmp_path):
    run = dataclasses.replace(mixed_run(), peak_flops_per_s=1.0e11)  # its facts counted no FLOPs
    report, paths, terminal = _written(tmp_path, run)
    assert report["mfu"] is None
    assert "MFU" not in terminal and "MFU" not in paths["md"].read_text() and 'id="mfu"' not in paths["html"].read_text()


def test_mfu_after_a_kept_bf16_is_of_the_bf16_peak(tmp_path):
    """A pick that computes in bf16 is set against the bf16 peak: against fp32's, a bf16 step
    on a CPU with bf16 instructions read 147% and 183%. Twin: the fp32 peak kept, over 100%,
    is said to be no bound rather than "at most 0.5x is left"."""
    run = mixed_run()
    facts = dataclasses.replace(run.facts, flops_per_step=840_000_000)
    bf16 = dataclasses.replace(run, facts=facts, peak_flops_per_s=1.0e10, peak_dtype="fp32",
                               after_peak_flops_per_s=4.0e10, after_peak_dtype="bf16")
    report, _, terminal = _written(tmp_path / "bf16", bf16)
    after_ms = report["after"]["ms_per_step"]
    assert report["mfu"]["after_pct"] == pytest.approx(100 * 8.4e8 / (after_ms / 1000) / 4e10)
    assert report["mfu"]["after_pct"] < 100 and report["mfu"]["after_dtype"] == "bf16"
    assert "of this machine's fp32 matmul peak before, its bf16 peak after" in terminal
    fp32 = dataclasses.replace(bf16, after_peak_flops_per_s=None, after_peak_dtype="")
    report, _, terminal = _written(tmp_path / "fp32", fp32)
    assert report["mfu"]["after_pct"] > 100
    assert "over 100%: the probe's peak was measured lower" in terminal and "is left in compute" not in terminal


@pytest.mark.parametrize("settings, dtype", [
    ({"precision.mode": "bf16"}, "bf16"), ({"fp32_math.mode": "bf16"}, "bf16"),
    ({"precision.mode": "fp16", "fp32_math.mode": "bf16"}, "fp16"), ({"cpu.threads": 1}, "fp32"),
])
def test_the_dtype_a_pick_computes_in(settings, dtype):
    from torchboost.config import Overlay
    from torchboost.tune.tuner import _tuned_dtype

    assert _tuned_dtype("fp32", Overlay(settings)) == dtype
