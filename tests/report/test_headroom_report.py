"""The headroom line leads the terminal, Markdown and HTML reports, and sits in report.json."""

from __future__ import annotations

import json
from dataclasses import replace

from rich.console import Console

from _report_helpers import data_bound_facts, findings_for
from torchboost.diagnose.headroom import headroom_of
from torchboost.limits.machine import MachineLimits, MatmulRate
from torchboost.report import print_doctor_report, write_doctor_report

LIMITS = MachineLimits(key="k", device="cpu", name="Example CPU", threads=6,
                       matmul=[MatmulRate("fp32", 2048, 1.0e11, 0.5)], bandwidth_bytes_per_s=2e10)


def _written(tmp_path, with_headroom: bool, bytes_by_op: dict[str, int] | None = None):
    facts = replace(data_bound_facts(), flops_per_step=2_000_000_000, flops_by_op={"aten.addmm": 2_000_000_000},
                    bytes_by_op=bytes_by_op or {})
    headroom = headroom_of(facts, LIMITS, "busy machine: the probe got 50%") if with_headroom else None
    paths = write_doctor_report(facts, findings_for(facts), tmp_path, headroom=headroom)
    console = Console(record=True, width=200)
    print_doctor_report(facts, findings_for(facts), console, paths, headroom=headroom)
    return paths, console.export_text()


def test_the_line_leads_every_format(tmp_path):
    paths, terminal = _written(tmp_path, with_headroom=True)
    report = json.loads(paths["json"].read_text())
    headroom = report["headroom"]
    # 2e9 FLOPs per ~105 ms step of a 100 GFLOP/s peak
    assert headroom["bound"] == "data" and 15 < headroom["mfu_pct"] < 25
    line = headroom["line"]
    assert line.startswith("This step runs at 19% of this machine's fp32 matmul peak; at most 5.3x")
    assert terminal.splitlines()[2] == line  # after the rule and the command
    markdown = paths["md"].read_text()
    assert markdown.index(line) < markdown.index("## Where the step goes")
    html = paths["html"].read_text()
    assert html.index('id="headroom"') < html.index("Where the step goes")
    assert "busy machine: the probe got 50%" in report["notes"]


def test_twin_without_headroom_no_line_is_printed(tmp_path):
    paths, terminal = _written(tmp_path, with_headroom=False)
    assert json.loads(paths["json"].read_text())["headroom"] is None
    assert "matmul peak" not in terminal and "matmul peak" not in paths["md"].read_text()
    assert 'id="headroom"' not in paths["html"].read_text()


def test_the_hottest_operators_give_the_flop_carrying_ops_rate_against_the_peak(tmp_path):
    paths, _ = _written(tmp_path, with_headroom=True)
    markdown = paths["md"].read_text()
    # addmm: 2e9 FLOPs per step in 12 ms per step (24 ms over the window's 2 steps), of a 100 GFLOP/s peak
    addmm = next(line for line in markdown.splitlines() if line.startswith("| `aten::addmm`"))
    assert addmm.endswith("| 167 GFLOP/s, 167% of its roof |")  # no bytes counted: the roof is the peak
    loader = next(line for line in markdown.splitlines() if line.startswith("| `enumerate(DataLoader)"))
    assert loader.endswith("|  |")  # the twin: an op that carries no FLOPs has no rate
    assert "167 GFLOP/s, 167% of its roof" in paths["html"].read_text()
    assert 'id="plot-roofline"' not in paths["html"].read_text()  # no op has both FLOPs and bytes


def test_with_bytes_counted_each_op_stands_against_its_roof_and_the_html_plots_the_roofline(tmp_path):
    # addmm: 2e9 FLOPs and 1e8 bytes (20 FLOP/byte) in 12 ms; the ridge is 1e11 / 2e10 = 5 FLOP/byte,
    # so its roof is the peak: 167 GFLOP/s, 167%, compute-bound
    paths, _ = _written(tmp_path, with_headroom=True, bytes_by_op={"aten.addmm": 100_000_000})
    report = json.loads(paths["json"].read_text())
    addmm = next(op for op in report["headroom"]["ops"] if op["name"] == "aten::addmm")
    assert addmm["intensity"] == 20.0 and addmm["bound"] == "compute"
    markdown = paths["md"].read_text()
    assert next(line for line in markdown.splitlines()
                if line.startswith("| `aten::addmm`")).endswith("| 167 GFLOP/s, 167% of its roof (compute) |")
    assert 'id="plot-roofline"' in paths["html"].read_text()


def test_the_roofline_draws_a_roof_for_each_native_dtype():
    from torchboost.report.plots import roof_lines, roofline_png

    lines = roof_lines(5e10, 1e10, {"fp32": 5e10, "bf16": 2e11}, "fp32", [0.5, 20.0])
    assert [label.split(" roof")[0] for label, _, _ in lines] == ["fp32", "bf16"]
    (_, x32, y32), (_, x16, y16) = lines
    assert (x32[1], y32[1]) == (5.0, 5e10) and (x16[1], y16[1]) == (20.0, 2e11)  # each its own ridge and peak
    assert x16[0] == x32[0] and x16[-1] == 80.0  # one x range, 4x past the farthest ridge
    ops = [{"name": "aten::mm", "intensity": 8.0, "achieved_flops_per_s": 3e10, "bound": "compute"}]
    assert roofline_png(ops, 5e10, 1e10, {"fp32": 5e10, "bf16": 2e11}, "fp32").startswith(b"\x89PNG")


def test_twin_with_fp32_alone_there_is_one_roof():
    from torchboost.report.plots import roof_lines

    assert len(roof_lines(5e10, 1e10, {"fp32": 5e10}, "fp32", [1.0])) == 1
    assert len(roof_lines(5e10, 1e10, None, "fp32", [1.0])) == 1
