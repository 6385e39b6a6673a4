"""The doctor's report in the terminal: rich tables from the report.json document.

User text (command, op and class names) goes in as ``Text``, never as markup, so a "[" in
it prints as itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from torchboost.report import _format as fmt
from torchboost.report.compile_section import compile_lines
from torchboost.report.plots import PHASE_COLORS

__all__ = ["print_report"]

_BAR_WIDTH = 30


def _breakdown_table(report: dict[str, Any]) -> Table:
    table = Table(title="Where the step goes", title_justify="left")
    table.add_column("phase")
    table.add_column("ms / step", justify="right")
    table.add_column("share", justify="right")
    table.add_column("")
    for phase in fmt.shown_phases(report["phase_ms"]):
        pct = report["breakdown_pct"][phase]
        bar = Text("█" * round(pct / 100 * _BAR_WIDTH), style=PHASE_COLORS[phase])
        table.add_row(fmt.PHASE_LABELS[phase], f"{report['phase_ms'][phase]:.2f}", f"{pct:.1f}%", bar)
        for row in fmt.lines_under(report, phase):
            table.add_row(Text(f"  {fmt.line_label(row)}", style="dim"), f"{row['ms']:.2f}", f"{row['pct']:.1f}%", "")
    return table


def _findings_table(findings: list[dict[str, Any]]) -> Table:
    table = Table(title="Findings, ranked by measured or expected speedup", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("id", style="bold")
    table.add_column("finding")
    table.add_column("speedup", justify="right")
    for i, f in enumerate(findings, 1):
        table.add_row(str(i), Text(f["id"]), Text(f["title"]), fmt.gain(f))
    return table


_CHANGES_TITLE = "Would change what is trained (not ranked with the speedups above)"


def _changes_table(findings: list[dict[str, Any]]) -> Table:
    table = Table(title=_CHANGES_TITLE, title_justify="left")
    table.add_column("id", style="bold")
    table.add_column("finding")
    table.add_column("per sample", justify="right")
    for f in findings:
        table.add_row(Text(f["id"]), Text(f["title"]), fmt.speedup(f["expected_speedup"]))
    return table


def _memory_table(findings: list[dict[str, Any]]) -> Table:
    table = Table(title="To fit in memory (each costs time; not ranked with the speedups)", title_justify="left")
    table.add_column("id", style="bold")
    table.add_column("finding")
    table.add_column("peak memory", justify="right")
    table.add_column("step time", justify="right")
    for f in findings:
        table.add_row(Text(f["id"]), Text(f["title"]), fmt.memory_change(f["memory_ratio"]),
                      fmt.time_cost(f["expected_speedup"]))
    return table


def _top_panel(f: dict[str, Any]) -> Panel:
    body = Table.grid(padding=(0, 1))
    body.add_row(Text("evidence:", style="bold"),
                 Text(", ".join(f"{k}={fmt.evidence_value(k, v)}" for k, v in f["evidence"].items())))
    body.add_row(Text("toml:", style="bold"), Syntax(f["fix"]["toml"], "toml", theme="ansi_dark", word_wrap=True))
    body.add_row(Text("PyTorch:", style="bold"), Syntax(f["fix"]["torch"], "python", theme="ansi_dark", word_wrap=True))
    for framework in ("lightning", "accelerate", "transformers"):
        if f["fix"].get(framework):
            body.add_row(Text(f"{framework}:", style="bold"), Text(f["fix"][framework]))
    body.add_row(Text("estimate:", style="bold"), Text(f["formula"]))
    if fmt.measured(f):
        body.add_row(Text("measured:", style="bold"), Text(fmt.measured(f)))
    for note in f["notes"]:
        body.add_row(Text("note:", style="bold"), Text(note))
    title = Text.assemble("top finding: ", (f["id"], "bold"), f"  {fmt.gain(f)}")
    return Panel(body, title=title, title_align="left")


def print_report(report: dict[str, Any], console: Console, paths: dict[str, Path]) -> None:
    """Print ``report`` (a build_report document) to ``console``, then the report file paths."""
    console.rule("torchboost doctor")
    console.print(Text(fmt.command(report["command"]), style="dim"))
    for process in report.get("processes", []):
        console.print(Text(f"observed: {process}", style="dim"))
    if report.get("headroom"):
        console.print(Text(report["headroom"]["line"], style="bold"))
    console.print(Text(fmt.headline(report)))
    console.print(_breakdown_table(report))
    if report["findings"]:
        console.print(_findings_table(report["findings"]))
        console.print(_top_panel(report["findings"][0]))
        console.print(Text("Every finding's fix and evidence are in the report files below.", style="dim"))
    else:
        console.print(Text("No finding."))
    if report.get("training_changes"):
        console.print(_changes_table(report["training_changes"]))
    if report.get("memory_fixes"):
        console.print(_memory_table(report["memory_fixes"]))
    for line in compile_lines(report.get("compile")):
        console.print(Text(f"• {line}"))
    for note in report["notes"]:
        console.print(Text(f"• {note}"))
    for kind, path in paths.items():
        console.print(Text.assemble((f"{kind:>5}: ", "bold"), str(path)))
