"""The tuner's report.html: one self-contained page with the waterfall plot embedded as a
base64 PNG, from a jinja2 template with autoescaping on, so user strings stay text."""

from __future__ import annotations

from typing import Any, Sequence

from torchboost.report import _format as fmt
from torchboost.report import _tune_text as words
from torchboost.report._tune_markdown import STATUS_MEANINGS, TOP_FINDINGS, before_after
from torchboost.report.html import data_uri, load_template
from torchboost.report.plots import _figure, _png

__all__ = ["render_tune_html", "waterfall_png", "TUNE_TEMPLATE_NAME"]

TUNE_TEMPLATE_NAME = "tune.html.j2"
"""The template in ``torchboost/report/templates``."""

_BASELINE_COLOR = "#9e9e9e"
_KEPT_COLOR = "#54a24b"


def waterfall_png(waterfall: Sequence[dict[str, Any]]) -> bytes:
    """Bars of ms per step (mean of the measured steps): the baseline, then each kept technique, with the A/B pair-ratio
    spread as error bars and the speedup vs baseline (and the peak memory, when measured) written on each bar; PNG bytes.

    ``waterfall`` is report.json's list. matplotlib is drawn on a bare Agg figure here only.
    """
    fig = _figure(max(5.0, 1.6 * len(waterfall) + 2.0), 3.6)
    ax = fig.add_subplot(1, 1, 1)
    if not waterfall:
        ax.text(0.5, 0.5, "no step was measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return _png(fig)
    x = list(range(len(waterfall)))
    colors = [_BASELINE_COLOR] + [_KEPT_COLOR] * (len(waterfall) - 1)
    ax.bar(x, [w["ms_per_step"] for w in waterfall], color=colors, width=0.6)
    # Error bars only where pairs were measured: the baseline has no ratio to spread.
    kept = [(i, w) for i, w in enumerate(waterfall) if w["ratios"]]
    if kept:
        ax.errorbar([i for i, _ in kept], [w["ms_per_step"] for _, w in kept],
                    # max(0, .): the range ends equal the median up to rounding
                    yerr=[[max(0.0, w["ms_per_step"] - w["step_ms_range"][0]) for _, w in kept],
                          [max(0.0, w["step_ms_range"][1] - w["ms_per_step"]) for _, w in kept]],
                    fmt="none", ecolor="#333333", capsize=6)
    for i, w in enumerate(waterfall):
        peak = f"\n{words.memory(w['peak_memory_bytes'])}" if w.get("peak_memory_bytes") else ""
        ax.text(i, w["step_ms_range"][1], f"{w['ms_per_step']:.1f} ms\n{w['speedup']:.2f}x{peak}",
                ha="center", va="bottom", fontsize=9)
    ax.set_title(f"{waterfall[-1]['speedup']:.2f}x faster than the baseline", fontsize=10)
    ax.set_xticks(x)
    ax.set_xticklabels([_wrap(w["label"]) for w in waterfall], fontsize=8)
    ax.set_ylabel("ms per step (lower is faster)")
    ax.set_ylim(0, max(w["step_ms_range"][1] for w in waterfall) * 1.3)
    ax.spines[["top", "right"]].set_visible(False)
    return _png(fig)


def _wrap(label: str, width: int = 18) -> str:
    # Long technique titles under narrow bars: break them on spaces into a few lines.
    lines, line = [], ""
    for word in label.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join(lines + [line])


def render_tune_html(report: dict[str, Any]) -> str:
    """The HTML page for ``report`` (a :func:`~torchboost.report.tune_report.build_tune_report` document)."""
    return load_template(TUNE_TEMPLATE_NAME).render(
        report=report,
        command=fmt.command(report["command"]),
        headline=before_after(report),
        waterfall=[{**w, "speedup_text": words.vs_baseline(w["speedup"]), "spread_text": words.spread(w),
                    "memory_text": words.memory(w["peak_memory_bytes"])} for w in report["waterfall"]],
        memory_line=words.memory_line(report),
        mfu_line=words.mfu_line(report),
        decisions=[{**d, "speed": words.speed(d["ratio"]), "memory_text": words.memory(d["peak_memory_bytes"]),
                    "ratio_text": "" if d["ratio"] is None else f"{d['ratio']:.3f}"}
                   for d in report["decisions"]],
        statuses=list(STATUS_MEANINGS.items()),
        findings=[{**f, "speedup": fmt.speedup(f["expected_speedup"])} for f in report["findings"][:TOP_FINDINGS]],
        more_findings=max(0, len(report["findings"]) - TOP_FINDINGS),
        waterfall_src=data_uri(waterfall_png(report["waterfall"])),
    )
