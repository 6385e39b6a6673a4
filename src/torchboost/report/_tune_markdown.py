"""The tuner's report.md, rendered from the report.json document of :mod:`torchboost.report.tune_report`."""

from __future__ import annotations

from typing import Any

from torchboost.report import _format as fmt
from torchboost.report import _tune_text as words
from torchboost.report.markdown import _cell, _fence

__all__ = ["render_tune_markdown", "STATUS_MEANINGS", "before_after", "TOP_FINDINGS"]

STATUS_MEANINGS = {
    "kept": "confirmed faster beyond the noise floor, repaid over the planned run, still correct (a memory lever: "
            "brought the peak under the memory limit, whatever its time cost): in torchboost.toml",
    "slower": "confirmed slower, measured in pairs against the configuration kept so far",
    "not_beyond_noise": "faster, but by less than the noise floor or the least gain asked for",
    "not_repaid": "faster per step, but its fixed cost (compile, start-up) is not repaid over the planned run",
    "screened_out": "another candidate of the same technique was faster in screening",
    "replaced": "kept, then replaced by another candidate of the same technique confirmed faster than it",
    "unconfirmed": "the budget ran out before a confirming pair",
    "incorrect": "faster or not, it changed the training loss beyond tolerance",
    "failed": "the script crashed or timed out with it",
    "skipped": "not tried: the evidence said it could not pay off (a memory lever: nothing was over the memory limit)",
    "over_memory": "its peak memory was over the memory limit: however fast, it would not fit the run",
}
"""What each decision status means, in the words every format uses."""

TOP_FINDINGS = 5
"""How many of the doctor's findings the reports list."""


def _text(text: str) -> str:
    # A table cell or list item that renderers read as Markdown: a "<" stays a character,
    # so user text cannot open an HTML tag.
    return _cell(text).replace("<", "\\<")


def _num(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def before_after(report: dict[str, Any]) -> str:
    """One line: "before 84.0 ms/step (381 samples/s), after 62.0 ms/step (516 samples/s): 1.35x faster"."""
    if report["status"] == "failed":
        return f"Not tuned: {report['error']}"

    def side(part: dict[str, Any]) -> str:
        rate = f" ({part['samples_per_s']:.0f} samples/s)" if part["samples_per_s"] else ""
        return f"{fmt.ms(part['ms_per_step'])}/step{rate}"

    verdict = f" ({report['verdict']})" if report.get("verdict") else ""
    if report["status"] == "unchanged":  # nothing written: the user's step stays as it was
        pick = (f"; the search's pick ran {side(report['after'])} in its trials, "
                f"{words.times(report['search_speedup'])}" if (report.get("search_speedup") or 1.0) > 1.0 else "")
        return f"before {side(report['before'])}, after: the same, nothing was kept{pick}{verdict}"
    if report["status"] == "unverified":  # written apart: not what the user gets until verified
        return (f"before {side(report['before'])}, measured {side(report['after'])}: "
                f"{words.times(report['search_speedup'])} a step, not verified end to end{verdict}")
    return f"before {side(report['before'])}, after {side(report['after'])}: {words.times(report['speedup'])} faster{verdict}"


def _waterfall(report: dict[str, Any]) -> list[str]:
    lines = ["| step | change | ms / step | samples / s | peak memory | vs baseline | pair-ratio spread |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for w in report["waterfall"]:
        spread = words.spread(w)
        lines.append(f"| {_cell(w['label'])} | {_cell(w['change'])} | {w['ms_per_step']:.2f} | "
                     f"{_num(w['samples_per_s'], '.0f')} | {words.memory(w['peak_memory_bytes'])} | "
                     f"{words.vs_baseline(w['speedup'])} | {spread} |")
    return lines


def _decisions(report: dict[str, Any]) -> list[str]:
    lines = ["| # | technique | change | status | ratio | speed | peak memory | break-even | reason |",
             "|---:|---|---|---|---:|---|---:|---|---|"]
    for i, d in enumerate(report["decisions"], 1):
        lines.append(f"| {i} | {_cell(d['technique'])} | `{_cell(d['change'])}` | **{d['status']}** | "
                     f"{_num(d['ratio'], '.3f')} | {words.speed(d['ratio'])} | {words.memory(d['peak_memory_bytes'])} | "
                     f"{_cell(d['break_even'] or '–')} | {_text(d['reason'])} |")
    return lines


def render_tune_markdown(report: dict[str, Any]) -> str:
    """The Markdown text of ``report`` (a :func:`~torchboost.report.tune_report.build_tune_report` document)."""
    lines = ["# torchboost tune report", "", _fence(fmt.command(report["command"]), "sh"), "",
             f"**{_text(before_after(report))}**", ""]
    lines += [f"- **{_cell(line)}**" for line in report["precision"]]
    lines += ["", "## Waterfall: from your script as it is to the tuned configuration", ""]
    lines += _waterfall(report) if report["waterfall"] else ["No step was measured."]
    for line in (words.memory_line(report), words.mfu_line(report)):
        if line is not None:
            lines += ["", f"{line[0].upper()}{line[1:]}."]
    lines += ["", "A ratio is the candidate's time per step (mean of its measured steps) over the configuration before it "
              "(below 1 is faster); the spread is the largest minus the smallest of the A/B pair ratios "
              "that confirmed it.",
              "", "## Every candidate tried", ""]
    lines += _decisions(report) if report["decisions"] else ["No candidate was decided."]
    lines += ["", *(f"- **{s}**: {meaning}" for s, meaning in STATUS_MEANINGS.items()), ""]
    compile_lines = [d for d in report["decisions"] if d["break_even"] is not None]
    if compile_lines:
        lines += ["## Does torch.compile pay for itself?", ""]
        lines += [f"- `{_cell(d['change'])}` ({d['status']}): break-even {_cell(d['break_even'])}"
                  for d in compile_lines]
        lines.append("")
    lines += ["## The doctor's top findings", ""]
    findings = report["findings"][:TOP_FINDINGS]
    lines += [f"{i}. `{f['id']}` expected {fmt.speedup(f['expected_speedup'])}: {_text(f['title'])}"
              for i, f in enumerate(findings, 1)] or ["No finding."]
    if len(report["findings"]) > TOP_FINDINGS:
        lines.append(f"\n({len(report['findings']) - TOP_FINDINGS} more in report.json.)")
    lines += ["", "## torchboost.toml", ""]
    config = report["config"]
    if config["toml"] is None:
        lines.append("Not written: the baseline did not run.")
    elif config.get("state") == "not written":
        lines.append(f"Not written: {words.NOTHING_TO_USE}.")
    else:
        where = (f"Your `{_cell(config['path'])}`, as it was" if config.get("state") == "as it was"
                 else f"Written to `{_cell(config['path'])}`" if config["path"] else "The tuned configuration")
        use = (words.NOTHING_TO_USE if not report["settings"]
               else f"`{_cell(report['next_step']['text'])}`")
        lines += [f"{where}. Use it: {use}", "",
                  _fence(config["toml"].rstrip("\n"), "toml")]
    lines += ["", "## Notes", ""]
    lines += [f"- {_text(n)}" for n in report["notes"]]
    return "\n".join(lines) + "\n"
