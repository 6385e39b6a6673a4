"""report.md: the doctor's report as Markdown, rendered from the report.json document."""

from __future__ import annotations

import re
from typing import Any

from torchboost.report import _format as fmt
from torchboost.report.compile_section import compile_lines

__all__ = ["render_markdown"]


_FRAMEWORK_LABELS = (("lightning", "Lightning"), ("accelerate", "Accelerate"), ("transformers", "the Hugging Face Trainer"))


def _fence(text: str, lang: str = "") -> str:
    # A fence longer than any backtick run inside, so user text cannot close it early.
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}{lang}\n{text}\n{bar}"


def _cell(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _finding(rank: int, f: dict[str, Any]) -> list[str]:
    lines = [
        f"### {rank}. `{f['id']}`: {_cell(f['title'])}",
        "",
        ("**Fix this first**: the run is wrong before it is slow." if f.get("blocking") else
         f"Expected speedup **{fmt.expected(f['expected_speedup'])}** per {f.get('unit', 'step')} "
         f"({f['severity']})." + (f" {fmt.measured(f).capitalize()}." if fmt.measured(f) else "")),
        "",
        "| evidence | value |",
        "|---|---:|",
        *(f"| {_cell(k)} | {_cell(fmt.evidence_value(k, v))} |" for k, v in f["evidence"].items()),
        "",
        "Fix in `torchboost.toml`:",
        "",
        _fence(f["fix"]["toml"], "toml"),
        "",
        "Or in plain PyTorch:",
        "",
        _fence(f["fix"]["torch"], "python"),
        "",
        *(f"In {label}: `{_cell(f['fix'][name])}`\n" for name, label in _FRAMEWORK_LABELS if f["fix"].get(name)),
        f"How the speedup was estimated: {_cell(f['formula'])}",
        "",
    ]
    lines += [f"- {_cell(n)}" for n in f["notes"]]
    return lines + [""]


def _all_lines(section: dict[str, Any] | None) -> list[str]:
    """The whole line view: every sampled line of the user's code, by phase, ms a step."""
    if not section or not section["lines"]:
        return []
    out = ["", f"## Where the step's time went, line by line (sampled every {section['interval_ms']:g} ms)", "",
           "| phase | line | call | from | ms per step | share |", "|---|---|---|---|---:|---:|"]
    out += [f"| {row['bucket']} | [`{_cell(row['where'])}`]({row['href']}) | `{_cell(row['name'] or row['code'])}` | "
            f"{_cell(row['via'])} | {row['ms']:.2f} | {row['pct']:.1f}% |" for row in section["lines"][:40]]
    if len(section["lines"]) > 40:
        out.append(f"\n{len(section['lines']) - 40} more lines under 'host_lines' in report.json.")
    return out


def render_markdown(report: dict[str, Any]) -> str:
    """The Markdown text of ``report`` (a :func:`~torchboost.report.doctor_report.build_report` document)."""
    lines = [
        "# torchboost doctor report",
        "",
        _fence(fmt.command(report["command"]), "sh"),
        "",
        *([f"**{report['headroom']['line']}**", ""] if report.get("headroom") else []),
        fmt.headline(report),
        "",
        "## Where the step goes",
        "",
        "| phase | ms per step | share |",
        "|---|---:|---:|",
    ]
    for phase in fmt.shown_phases(report["phase_ms"]):
        lines.append(f"| {fmt.PHASE_LABELS[phase]} | {report['phase_ms'][phase]:.2f} | "
                     f"{report['breakdown_pct'][phase]:.1f}% |")
        lines += [f"| &nbsp;&nbsp;{_cell(fmt.line_label(row))} | {row['ms']:.2f} | {row['pct']:.1f}% |"
                  for row in fmt.lines_under(report, phase)]
    lines += _all_lines(report.get("host_lines"))
    hot = fmt.hottest_ops(report)
    if hot:
        lines += ["", "## Hottest operators (per step, by self time)", "",
                  "| operator | self CPU ms | self device ms | calls | share | achieved (against its roof) |",
                  "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| `{_cell(op['name'])}` | {op['self_cpu_ms']:.3f} | {op['self_device_ms']:.3f} | "
                  f"{op['calls']:g} | {op['share_pct']:.1f}% | {op['rate']} |" for op in hot]
    lines += ["", "## Findings, ranked by measured or expected speedup", ""]
    if report["findings"]:
        lines += [f"{i}. `{f['id']}` {fmt.gain(f)}: {_cell(f['title'])}"
                  for i, f in enumerate(report["findings"], 1)]
        lines.append("")
        for i, f in enumerate(report["findings"], 1):
            lines += _finding(i, f)
    else:
        lines += ["No finding.", ""]
    if report.get("training_changes"):
        lines += ["## Would change what is trained", "",
                  "Not ranked with the speedups above: these change the optimisation, and their figure "
                  "is per sample, not per step. tune does not try them.", ""]
        for i, f in enumerate(report["training_changes"], 1):
            lines += _finding(i, f)
    if report.get("memory_fixes"):
        lines += ["## To fit in memory", "",
                  "Not ranked with the speedups above: each lowers the peak memory and costs time.", ""]
        for i, f in enumerate(report["memory_fixes"], 1):
            lines += [f"- `{f['id']}`: peak memory {fmt.memory_change(f['memory_ratio'])}, step time "
                      f"{fmt.time_cost(f['expected_speedup'])}", ""]
            lines += _finding(i, f)
    if report.get("compile"):
        lines += ["## torch.compile", ""] + [f"- {_cell(line)}" for line in compile_lines(report["compile"])] + [""]
    lines += ["## Notes", ""]
    lines += [f"- {_cell(n)}" for n in report["notes"]]
    return "\n".join(lines) + "\n"
