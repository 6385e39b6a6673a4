"""Small formatting helpers shared by the terminal, Markdown and HTML renderers."""

from __future__ import annotations

import shlex
from typing import Any, Mapping

from torchboost.evidence.findings import Measured
from torchboost.evidence.observed import HOST_PARTS, PHASES
from torchboost.report.limits_text import flops_text

PHASE_LABELS = {
    "data": "waiting for data",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer step",
    "checkpoint": "checkpoint writes (torch.save)",
    "output": "printing and logging",
    "other": "other (host code, syncs)",
}


def shown_phases(values: Mapping[str, float]) -> list[str]:
    """The phases a report's table shows for ``values`` (ms or percent by phase): every phase
    of the loop and "other", and each host part (checkpoint writes, output) only where measured."""
    return [p for p in PHASES if p not in HOST_PARTS or values.get(p)]


def lines_under(report: Mapping[str, Any], phase: str) -> list[dict[str, Any]]:
    """The user's lines the phase table shows under ``phase``'s row (its share of the step or
    more: :data:`~torchboost.evidence.host_lines.LINE_SHARE_PCT`), largest first."""
    section = report.get("host_lines") or {}
    return [row for row in section.get("shown", []) if row["bucket"] == phase]


def line_label(row: Mapping[str, Any]) -> str:
    """A line row in words: ``train.py:6 spin(40)``, and the loop's line that led there
    (``from train.py:12``) when the line is in a function the loop called."""
    via = f" (from {row['via']})" if row.get("via") else ""
    return f"{row['where']} {row['name']}{via}"


def ms(value: float | None) -> str:
    """"12.3 ms", or "n/a" when unknown."""
    return "n/a" if value is None else f"{value:.1f} ms"


def speedup(value: float) -> str:
    """"x1.25"."""
    return f"x{value:.2f}"


def estimated(expected_speedup: float) -> bool:
    """Whether a finding's ``expected_speedup`` is an estimate: 1.0 is what a finding with no
    defensible figure carries (a debugger attached, dev mode on); no rule fires for no gain."""
    return expected_speedup != 1.0


def expected(value: float) -> str:
    """"x1.25", or "not estimated" (see :func:`estimated`)."""
    return speedup(value) if estimated(value) else "not estimated"


def gain(finding: Mapping[str, Any]) -> str:
    """A report finding's expected gain: its quick probe's measurement beside the estimate
    where it has one ("x1.25 est., measured x2.30"), else the estimate labelled rough ("x1.25
    rough est.": estimates from the profile and the machine probe land anywhere from a third
    to twice the measured ratio, see benchmarks/RESULTS.md), "not estimated" (or "measured x2.30,
    not estimated") for one with no figure of its own, or "fix first" for a blocking one (a
    NaN loss)."""
    if finding.get("blocking"):
        return "fix first"
    measured = finding.get("measured")
    if not estimated(finding["expected_speedup"]):
        if measured and not _disagree(measured):
            return f"measured {speedup(measured['ratio'])}, not estimated"
        return "not estimated" + (", pairs disagreed" if measured else "")
    estimate = speedup(finding["expected_speedup"])
    if measured and _disagree(measured):
        return f"{estimate} rough est., pairs disagreed"
    return f"{estimate} est., measured {speedup(measured['ratio'])}" if measured else f"{estimate} rough est."


def _disagree(m: Mapping[str, Any]) -> bool:
    """A quick probe (a report's ``measured``: a :class:`Measured` as a dict) whose pairs
    measured nothing either way (``Measured.agree`` false)."""
    return not Measured(**m).agree


def measured(finding: Mapping[str, Any]) -> str:
    """"measured over 4 steps: x2.30 (bf16 autocast against plain steps)", or "" when the
    finding was not measured."""
    m = finding.get("measured")
    if not m:
        return ""
    if _disagree(m):
        return (f"measured over {m['steps']} steps: {speedup(m['ratio'])}, its pairs from {speedup(m['low'])} to "
                f"{speedup(m['high'])}: no measurement either way ({m['label']} against plain steps)")
    slower = ", slower than plain" if m["ratio"] < 1.0 else ""
    return f"measured over {m['steps']} steps: {speedup(m['ratio'])}{slower} ({m['label']} against plain steps)"


def memory_change(ratio: float | None) -> str:
    """Peak memory before / after as the change a reader sees: "-38%"."""
    if not ratio:
        return "unknown"
    return f"{(1 / ratio - 1) * 100:+.0f}%"


def time_cost(speedup_value: float) -> str:
    """A time ratio below 1 as the step's change: "+25%"."""
    return f"{(1 / speedup_value - 1) * 100:+.0f}%" if speedup_value > 0 else "unknown"


def command(parts: list[str]) -> str:
    """The command line as a shell would read it."""
    return shlex.join(parts) if parts else "(unknown)"


def value(v: Any) -> str:
    """An evidence value: byte counts in GiB too, floats trimmed."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.4e}"
    return f"{v:,}"


def evidence_value(key: str, v: Any) -> str:
    """:func:`value`, with GiB added for ``*_bytes`` keys."""
    text = value(v)
    if key.endswith("_bytes") and isinstance(v, (int, float)) and not isinstance(v, bool):
        text += f" ({v / 2**30:.2f} GiB)"
    return text


def headline(report: dict[str, Any]) -> str:
    """One line: steps, median/p90 step time, throughput."""
    st = report["step_time_ms"]
    parts = [f"{report['steps_observed']} steps observed ({report['ended']})",
             f"median step {ms(st['median'])}", f"p90 {ms(st['p90'])}"]
    if report.get("samples_per_s"):
        parts.append(f"{report['samples_per_s']:.1f} samples/s")
    if report.get("job"):
        parts.append(f"rank {report['job']['slowest_rank']} of {report['job']['world_size']} (slowest)")
    return " · ".join(parts)


def op_rate(report: dict[str, Any], name: str, ms_per_step: float) -> str:
    """An operator against its roof (``headroom.ops``): "11.6 GFLOP/s, 54% of its roof
    (compute)" for one that carries FLOPs, "9.1 GB/s, 35% of bandwidth" for one that moves
    bytes only; without a roofline, its FLOP/s against the peak; "" when nothing was counted."""
    roofs = {op["name"]: op for op in (report.get("headroom") or {}).get("ops") or []}
    roof = roofs.get(name)
    if roof is not None and roof.get("pct_of_roof") is not None:
        if roof.get("flops"):
            return (f"{flops_text(roof['achieved_flops_per_s'])}, {roof['pct_of_roof']:.0f}% of its roof"
                    + (f" ({roof['bound']})" if roof.get("bound") else ""))
        return f"{flops_text(roof['achieved_bytes_per_s'], 'B/s')}, {roof['pct_of_roof']:.0f}% of bandwidth"
    flops = ((report.get("facts") or {}).get("flops_by_op") or {}).get(name.replace("::", "."))
    if not flops or ms_per_step <= 0:
        return ""
    rate = flops / (ms_per_step / 1000.0)
    peak = (report.get("headroom") or {}).get("peak_flops_per_s")
    return flops_text(rate) + (f" ({100.0 * rate / peak:.0f}%)" if peak else "")


def hottest_ops(report: dict[str, Any], n: int = 10) -> list[dict[str, Any]]:
    """The profiler window's top operators by self time, per step, with their share of the
    window's op time (the view TensorBoard's operator page and Lightning's profiler give),
    and for those that carry FLOPs their rate against the machine's peak (``rate``)."""
    profile = (report.get("facts") or {}).get("profile") or {}
    ops, steps = profile.get("top_ops") or [], max(1, int(profile.get("steps") or 1))
    total = sum(max(op["self_cpu_ms"], op["self_device_ms"]) for op in ops) or 1.0
    return [{"name": op["name"], "self_cpu_ms": op["self_cpu_ms"] / steps, "self_device_ms": op["self_device_ms"] / steps,
             "calls": op["calls"] / steps, "share_pct": 100.0 * max(op["self_cpu_ms"], op["self_device_ms"]) / total,
             "shapes": op.get("input_shapes"),
             "rate": op_rate(report, op["name"], max(op["self_cpu_ms"], op["self_device_ms"]) / steps)}
            for op in ops[:n]]
