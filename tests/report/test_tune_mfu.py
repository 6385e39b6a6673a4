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
