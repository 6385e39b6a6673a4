"""PNG plots for the HTML report: step-time breakdown, per-step timeline, roofline.

Only the HTML writer calls these. matplotlib is imported inside each function and drawn
on an Agg canvas attached to a bare Figure, so no global backend or pyplot state changes.
"""

from __future__ import annotations

import io
from typing import Any, Mapping, Sequence

from torchboost.evidence.observed import PHASES, StepRecord
from torchboost.report._format import shown_phases

__all__ = ["breakdown_png", "robust_top", "roof_lines", "roofline_png", "timeline_png", "PHASE_COLORS"]

PHASE_COLORS = {
    "data": "#e45756",
    "forward": "#4c78a8",
    "backward": "#72b7b2",
    "optimizer": "#f58518",
    "checkpoint": "#b279a2",
    "output": "#eeca3b",
    "other": "#bab0ac",
}
"""One color per phase, shared by both plots and the HTML legend."""


def _figure(width_in: float, height_in: float):
    # matplotlib is deferred to the first plot: importing it costs about a second
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=100)
    FigureCanvasAgg(fig)  # Agg for this figure only, whatever backend the process uses
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def breakdown_png(breakdown_pct: Mapping[str, float]) -> bytes:
    """One horizontal bar, 100% wide, split by phase (percent of step time); PNG bytes."""
    fig = _figure(8.0, 1.4)
    ax = fig.add_subplot(1, 1, 1)
    left = 0.0
    phases = shown_phases(breakdown_pct)
    for phase in phases:
        pct = float(breakdown_pct.get(phase, 0.0))
        ax.barh([0], [pct], left=left, color=PHASE_COLORS[phase], label=f"{phase} {pct:.0f}%")
        if pct >= 6:
            ax.text(left + pct / 2, 0, f"{pct:.0f}%", ha="center", va="center", color="white", fontsize=9)
        left += pct
    if left == 0:
        ax.text(50, 0, "no step observed", ha="center", va="center")
    ax.set_xlim(0, 100)
    ax.set_yticks([])
    ax.set_xlabel("share of step time (%)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=len(phases), frameon=False, fontsize=8)
    return _png(fig)


def timeline_png(steps: Sequence[StepRecord]) -> bytes:
    """Stacked bars, one per observed step (phase ms); PNG bytes."""
    fig = _figure(8.0, 3.2)
    ax = fig.add_subplot(1, 1, 1)
    if not steps:
        ax.text(0.5, 0.5, "no step observed", ha="center", va="center", transform=ax.transAxes)
    x = [s.index for s in steps]
    bottom = [0.0] * len(steps)
    heights_of = {p: [s.other_ms if p == "other" else getattr(s, f"{p}_ms") for s in steps] for p in PHASES}
    phases = shown_phases({p: sum(h) for p, h in heights_of.items()})
    for phase in phases:
        heights = heights_of[phase]
        ax.bar(x, heights, bottom=bottom, color=PHASE_COLORS[phase], label=phase, width=0.85)
        bottom = [b + h for b, h in zip(bottom, heights)]
    from matplotlib.ticker import MaxNLocator  # deferred with the rest of matplotlib

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    # Below the axes: a legend inside would cover the tallest bars.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=8, ncol=len(phases), frameon=False)
    top = robust_top(bottom)
    if top is not None:
        ax.set_ylim(0, top)
        for xi, total in zip(x, bottom):
            if total > top:  # an outlier is marked with its value, not allowed to flatten the rest
                ax.annotate(f"{total:.0f} ms", (xi, top), xytext=(0, -2), textcoords="offset points",
                            ha="center", va="top", fontsize=7, color="#c62828")
    else:
        ax.margins(y=0.15)
    return _png(fig)


def robust_top(values: Sequence[float]) -> float | None:
    """A y-axis top that keeps outliers from flattening the chart: 1.5x the 90th
    percentile when the largest value is over 3x it, else None (let the data decide)."""
    if len(values) < 5:
        return None
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return 1.5 * p90 if p90 > 0 and ordered[-1] > 3 * p90 else None


def roof_lines(peak: float, bandwidth: float, roofs: Mapping[str, float | None] | None, dtype: str,
               xs: Sequence[float]) -> list[tuple[str, list[float], list[float]]]:
    """The roofline's roofs as (label, x, y) polylines: the step's dtype's first, then one for
    each other dtype in ``roofs`` (peak FLOP/s by dtype) whose peak differs, lowest first; the
    x range spans ``xs`` (the operators' intensities) and every ridge, 4x either side."""
    others = {d: p for d, p in (roofs or {}).items() if p and d != dtype and abs(p - peak) > 0.01 * peak}
    peaks = [(f"{dtype + ' ' if dtype else ''}roof: {peak / 1e9:.3g} GFLOP/s peak, {bandwidth / 1e9:.3g} GB/s", peak)]
    peaks += [(f"{d} roof: {p / 1e9:.3g} GFLOP/s peak", p) for d, p in sorted(others.items(), key=lambda kv: kv[1])]
    ridges = [p / bandwidth for _, p in peaks]
    low, high = min([*xs, *ridges]) / 4, max([*xs, *ridges]) * 4
    return [(label, [low, p / bandwidth, high], [low * bandwidth, p, p]) for label, p in peaks]


def roofline_png(ops: Sequence[Mapping[str, Any]], peak: float | None, bandwidth: float | None,
                 roofs: Mapping[str, float | None] | None = None, dtype: str = "") -> bytes | None:
    """Log-log: each operator with FLOPs and bytes at (FLOP per byte, achieved FLOP/s) under
    the roof min(peak, intensity x bandwidth) of the step's ``dtype``, and a dashed roof for
    each other dtype the machine runs natively (``roofs``: peak FLOP/s by dtype,
    :func:`roof_lines`); PNG bytes, None when no operator has both or the peak or the
    bandwidth is unknown (``ops``: ``headroom.ops`` of report.json)."""
    placed = [op for op in ops if op.get("intensity") and op.get("achieved_flops_per_s")]
    if not placed or not peak or not bandwidth:
        return None
    fig = _figure(8.0, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for i, (label, xs, ys) in enumerate(roof_lines(peak, bandwidth, roofs, dtype, [op["intensity"] for op in placed])):
        ax.plot(xs, ys, color="#333333" if i == 0 else "#777777", linewidth=1.5 if i == 0 else 1.0,
                linestyle="-" if i == 0 else "--", label=label)
    for op in placed:
        color = PHASE_COLORS["forward"] if op.get("bound") == "compute" else PHASE_COLORS["data"]
        ax.scatter([op["intensity"]], [op["achieved_flops_per_s"]], color=color, zorder=3)
        ax.annotate(op["name"].replace("aten::", ""), (op["intensity"], op["achieved_flops_per_s"]),
                    xytext=(4, 4), textcoords="offset points", fontsize=8)
    ax.set_xlabel("FLOP per byte moved")
    ax.set_ylabel("FLOP/s")
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    return _png(fig)
