"""The tuner's report in the terminal: a before/after line, the waterfall and every decision
as rich tables, then where the files are.

Everything that may hold user text (command, reasons, error messages, paths) goes in as
``Text``, never as markup, so "[red]" in it prints as itself.
"""

from __future__ import annotations

import shlex

from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.text import Text

from torchboost.report import _format as fmt
from torchboost.report import _tune_text as words

__all__ = ["print_tune"]

_STATUS_STYLES = {"kept": "bold green", "slower": "bold yellow", "not_beyond_noise": "yellow",
                  "not_repaid": "yellow", "screened_out": "dim", "replaced": "dim", "unconfirmed": "yellow", "incorrect": "bold red",
                  "failed": "bold red", "skipped": "dim", "over_memory": "bold red"}
_TOP_FINDINGS = 3


def _rate(part: dict[str, Any]) -> str:
    return f" ({part['samples_per_s']:.0f} samples/s)" if part["samples_per_s"] else ""


def _headline(report: dict[str, Any]) -> Text:
    if report["status"] == "failed":
        return Text.assemble(("Not tuned: ", "bold red"), str(report["error"]))
    before, after = report["before"], report["after"]
    if report["status"] == "unchanged":
        gain = (words.unchanged(report), "bold yellow")
    else:
        gain = (f"{words.times(report['speedup'])} faster", "bold green")
    e2e = report["end_to_end"]
    if report["status"] == "tuned" and e2e and e2e["baseline_s"] and e2e["tuned_s"]:
        if e2e.get("interval"):
            low, high = e2e["interval"]
            gain = (f"{gain[0]} ({low:.2f}–{high:.2f}, {e2e['pairs']} pairs)", gain[1])
        projected = f" (projected to the planned {e2e['projected_to']} steps)" if e2e.get("projected_to") else ""
        return Text.assemble(
            ("Before: ", "bold"), f"{e2e['baseline_s']:.1f} s", ("  →  After: ", "bold"), f"{e2e['tuned_s']:.1f} s",
            f" end to end{projected}   ", gain, (f"   (per step: {fmt.ms(before['ms_per_step'])} → "
                                    f"{fmt.ms(after['ms_per_step'])}, {words.times(report['search_speedup'])})", "dim"),
        )
    if report["status"] == "unchanged":
        return _unchanged_headline(report, gain)
    if report["status"] == "unverified":  # measured, not what the user gets until verified
        return Text.assemble(
            ("Before: ", "bold"), f"{fmt.ms(before['ms_per_step'])}/step{_rate(before)}",
            ("  →  Measured, not verified end to end: ", "bold"), f"{fmt.ms(after['ms_per_step'])}/step{_rate(after)}",
            "   ", (f"{words.times(report['search_speedup'])} a step", "bold yellow"))
    return Text.assemble(
        ("Before: ", "bold"), f"{fmt.ms(before['ms_per_step'])}/step{_rate(before)}",
        ("  →  After: ", "bold"), f"{fmt.ms(after['ms_per_step'])}/step{_rate(after)}", "   ", gain,
    )


def _unchanged_headline(report: dict[str, Any], gain: tuple[str, str]) -> Text:
    """Nothing written: what the user gets is their step as it was. A pick of the search's
    that the end-to-end check did not confirm is named as such, never as the "After"."""
    before, after = report["before"], report["after"]
    text = Text.assemble(("Before: ", "bold"), f"{fmt.ms(before['ms_per_step'])}/step{_rate(before)}",
                         ("  →  After: ", "bold"), "the same", "   ", gain)
    if (report.get("search_speedup") or 1.0) > 1.0 and report.get("end_to_end"):
        text.append(f"   (the search's pick ran {fmt.ms(after['ms_per_step'])}/step in its trials, "
                    f"{words.times(report['search_speedup'])}; it did not hold end to end)", style="dim")
    return text


_STATUS_WIDTH = max(len(status) for status in _STATUS_STYLES)
_MEMORY_WIDTH = len("1.14 GiB")
"""Peak memory is right-aligned in this many columns: most peaks fit, and a candidate's
line keeps to 80 columns up to its change."""


def _waterfall_lines(report: dict[str, Any], console: Console) -> None:
    console.print(Text("Step by step: each change kept, on top of the ones before it", style="bold"))
    for w in report["waterfall"]:
        rate = "" if w["samples_per_s"] is None else f"  {w['samples_per_s']:.0f} samples/s"
        spread = f"  (pair-ratio spread {words.spread(w)})" if w["ratios"] else ""
        label = f"+ {w['change']}" if w["ratios"] else "baseline: your script as is"
        peak = f"  {words.memory(w['peak_memory_bytes']):>{_MEMORY_WIDTH}}" if w["peak_memory_bytes"] else ""
        console.print(Text.assemble(f"  {w['ms_per_step']:7.2f} ms/step  ",
                                    (f"{words.vs_baseline(w['speedup'])}", "bold" if w["ratios"] else ""),
                                    f"{peak}{rate}  ", label, (spread, "dim")))
    for line in (words.memory_line(report), words.mfu_line(report)):
        if line is not None:
            console.print(Text(f"  {line[0].upper()}{line[1:]}", style="dim"))


def _decision_lines(report: dict[str, Any], console: Console) -> None:
    # One candidate a line: status, ratio, peak memory, the whole change, then its reason. Rich wraps
    # only at spaces, so a setting name or value is never split; the full table with
    # every column is in report.md and report.html.
    console.print(Text("Every candidate (ratio = new step time / previous, below 1 is faster; then its peak "
                       "memory; report.md has the full table and what each verdict means):", style="bold"))
    screened = [d for d in report["decisions"] if d["status"] == "screened_out"]
    if screened:
        console.print(Text.assemble("  ", (f"{'screened_out':<{_STATUS_WIDTH}}", _STATUS_STYLES["screened_out"]),
                                    f" {len(screened)} candidates: another of the same technique was faster in "
                                    "screening (each in report.md)"))
    for d in report["decisions"]:
        if d["status"] == "screened_out":
            continue
        ratio = "   n/a" if d["ratio"] is None else f"{d['ratio']:6.3f}"
        peak = words.memory(d["peak_memory_bytes"])
        console.print(Text.assemble("  ", (f"{d['status']:<{_STATUS_WIDTH}}", _STATUS_STYLES.get(d["status"], "")),
                                    f" {ratio}  {peak:>{_MEMORY_WIDTH}}  ", (d["change"], "bold"),
                                    ("  " + d["reason"], "dim")))


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
    state = config.get("state", "written")
    if state == "not written" or not config["path"]:
        console.print(Text.assemble(("torchboost.toml: ", "bold"), "not written: nothing to change"))
    else:
        console.print(Text.assemble(("torchboost.toml: ", "bold"), str(config["path"]),
                                    " (yours, as it was)" if state == "as it was" else ""))
        console.print(Text(f"  it changes: {changes}"))
    apart = report.get("unverified")
    if apart:
        console.print(Text.assemble((f"{Path(apart['path']).name}: ", "bold"), apart["path"]))
        if apart.get("tune_again"):
            console.print(Text(f"  verify it: {shlex.join(apart['tune_again'])}", style="dim"))
            console.print(Text(f"  or with whole runs: {shlex.join(apart['command'])}", style="dim"))
        else:
            console.print(Text(f"  verify it: {shlex.join(apart['command'])}", style="dim"))
        typed = apart["command"][apart["command"].index("--") + 1:]  # the user's command, as typed
        console.print(Text(f"  use it once verified: torchboost run --config {shlex.quote(apart['path'])} -- "
                           f"{shlex.join(typed)}", style="dim"))
        return
    if not report["settings"]:  # `torchboost run` would apply nothing new and cost its start-up
        console.print(Text(f"  use it: {words.NOTHING_TO_USE}", style="dim"))
        return
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
        _waterfall_lines(report, console)
    if report["decisions"]:
        _decision_lines(report, console)
        for d in report["decisions"]:
            if d["break_even"] is not None:
                console.print(Text.assemble(("torch.compile break-even: ", "bold"), d["break_even"],
                                            f" ({d['change']}: {d['status']})"))
    _print_context(report, console)
    _print_files(report, console, paths)

