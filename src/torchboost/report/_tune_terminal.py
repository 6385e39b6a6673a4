"""The tuner's report in the terminal: a before/after line, the waterfall and every decision
as rich tables, then where the files are.

Everything that may hold user text (command, reasons, error messages, paths) goes in as
``Text``, never as markup, so "[red]" in it prints as itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from torchboost.report import _format as fmt
from torchboost.report import _tune_text as words
from torchboost.report._tune_markdown import STATUS_MEANINGS

__all__ = ["print_tune"]

_STATUS_STYLES = {"kept": "bold green", "slower": "bold yellow", "not_beyond_noise": "yellow",
                  "not_repaid": "yellow", "screened_out": "dim", "unconfirmed": "yellow", "incorrect": "bold red",
                  "failed": "bold red", "skipped": "dim"}
_TOP_FINDINGS = 3


def _rate(part: dict[str, Any]) -> str:
    return f" ({part['samples_per_s']:.0f} samples/s)" if part["samples_per_s"] else ""


def _headline(report: dict[str, Any]) -> Text:
    if report["status"] == "failed":
        return Text.assemble(("Not tuned: ", "bold red"), str(report["error"]))
    before, after = report["before"], report["after"]
    if report["status"] == "unchanged":
        gain = ("nothing was faster beyond noise and still correct: nothing changed", "bold yellow")
    else:
        gain = (f"{words.times(report['speedup'])} faster", "bold green")
    e2e = report["end_to_end"]
    if report["status"] == "tuned" and e2e and e2e["baseline_s"] and e2e["tuned_s"]:
        return Text.assemble(
            ("Before: ", "bold"), f"{e2e['baseline_s']:.1f} s", ("  →  After: ", "bold"), f"{e2e['tuned_s']:.1f} s",
            " end to end   ", gain, (f"   (per step: {fmt.ms(before['ms_per_step'])} → "
                                    f"{fmt.ms(after['ms_per_step'])}, {words.times(report['search_speedup'])})", "dim"),
        )
    return Text.assemble(
        ("Before: ", "bold"), f"{fmt.ms(before['ms_per_step'])}/step{_rate(before)}",
        ("  →  After: ", "bold"), f"{fmt.ms(after['ms_per_step'])}/step{_rate(after)}", "   ", gain,
    )


def _one_per_line(change: str) -> str:
    # One setting a line keeps dotted names whole in a narrow terminal.
    return change.replace(", ", "\n")


def _waterfall_table(report: dict[str, Any]) -> Table:
    table = Table(title="Step by step: each technique kept, on top of the ones before it", title_justify="left")
    table.add_column("step")
    table.add_column("change", overflow="fold")
    table.add_column("ms / step", justify="right")
    table.add_column("samples / s", justify="right")
    table.add_column("vs baseline", justify="right")
    table.add_column("pair-ratio spread", justify="right")
    for w in report["waterfall"]:
        rate = "n/a" if w["samples_per_s"] is None else f"{w['samples_per_s']:.0f}"
        table.add_row(Text(w["label"]), Text(_one_per_line(w["change"])), f"{w['ms_per_step']:.2f}", rate,
                      Text(words.vs_baseline(w["speedup"]), style="bold" if w["ratios"] else ""),
                      Text(words.spread(w)))
    return table


def _decisions_table(report: dict[str, Any]) -> Table:
    table = Table(title="Every candidate tried (ratio = new step time / previous; below 1 is faster)",
                  title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("technique")
    table.add_column("change", overflow="fold")
    table.add_column("verdict")
    table.add_column("ratio", justify="right")
    table.add_column("speed")
    table.add_column("why")
    for i, d in enumerate(report["decisions"], 1):
        ratio = "n/a" if d["ratio"] is None else f"{d['ratio']:.3f}"
        table.add_row(str(i), Text(d["technique"]), Text(_one_per_line(d["change"])),
                      Text(d["status"], style=_STATUS_STYLES.get(d["status"], "")), ratio,
                      Text(words.speed(d["ratio"])), Text(d["reason"]))
    return table


def _print_context(report: dict[str, Any], console: Console) -> None:
    findings = report["findings"][:_TOP_FINDINGS]
    if findings:
        console.print(Text("The doctor's top findings (what the search tried first):", style="bold"))
        for i, f in enumerate(findings, 1):
            console.print(Text.assemble(f"  {i}. ", (f["id"], "bold"),
                                        f" expected {fmt.speedup(f['expected_speedup'])}: ", f["title"]))
    for note in report["notes"][1:]:  # the first note explains the method, said by the tables already
        console.print(Text(f"• {note}"))


def _print_files(report: dict[str, Any], console: Console, paths: dict[str, Path]) -> None:
    for kind, path in paths.items():
        console.print(Text.assemble((f"{kind:>5}: ", "bold"), str(path)))
    config = report["config"]
    if config["toml"] is None:
        console.print(Text("torchboost.toml was not written: the baseline did not run.", style="bold red"))
        return
    changes = ", ".join(f"{k}={v}" for k, v in sorted(report["settings"].items())) or "nothing (your setup as is)"
    console.print(Text.assemble(("torchboost.toml: ", "bold"), str(config["path"] or "(not written)")))
    console.print(Text(f"  it changes: {changes}"))
    console.print(Text(f"  use it: {report['next_step']['text']}", style="dim"))


def print_tune(report: dict[str, Any], console: Console, paths: dict[str, Path], *,
               precision: Sequence[dict[str, Any]] = ()) -> None:
    """Print ``report`` (a build_tune_report document) to ``console``, then the files.

    ``precision``: its decisions that lowered numeric precision, each said on its own line."""
    console.rule("torchboost tune")
    console.print(Text(fmt.command(report["command"]), style="dim"))
    console.print(_headline(report))
    if report["verdict"]:
        console.print(Text(report["verdict"], style="bold" if report["status"] == "tuned" else "yellow"))
    for warning in report["warnings"]:
        console.print(Text(f"warning: {warning}", style="bold yellow"))
    if report["status"] != "failed":
        console.print(Text("Your script was measured as it is, then with each technique on top; only what was "
                           "faster beyond noise and kept the same training loss was kept.", style="dim"))
    for d in precision:  # the lever people most often assume helps: say how it measured
        console.print(Text(d["verdict"], style=_STATUS_STYLES.get(d["status"], "")))
    if report["waterfall"]:
        console.print(_waterfall_table(report))
    if report["decisions"]:
        console.print(_decisions_table(report))
        for d in report["decisions"]:
            if d["break_even"] is not None:
                console.print(Text.assemble(("torch.compile break-even: ", "bold"), d["break_even"],
                                            f" ({d['change']}: {d['status']})"))
        used = {d["status"] for d in report["decisions"]}
        for status, meaning in STATUS_MEANINGS.items():
            if status in used:
                console.print(Text.assemble(("  " + status, _STATUS_STYLES[status]), f": {meaning}"))
    _print_context(report, console)
    _print_files(report, console, paths)
