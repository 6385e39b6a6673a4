"""report.html: a self-contained page (plots embedded as base64 PNG data URIs), from a
jinja2 template with autoescaping on, so user strings (command, op names) stay text."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Sequence

from torchboost.evidence.observed import StepRecord
from torchboost.report import _format as fmt
from torchboost.report.compile_section import compile_lines
from torchboost.report.plots import PHASE_COLORS, breakdown_png, roofline_png, timeline_png

__all__ = ["render_html", "TEMPLATE_NAME", "data_uri", "load_template"]

TEMPLATE_NAME = "doctor.html.j2"
"""The template in ``torchboost/report/templates``."""

_ENV_KEYS = ("device", "gpu_name", "cpu_cores", "cpu_capability", "cpu_bf16", "torch_version", "compile_reason")


def data_uri(png: bytes) -> str:
    """A PNG as an ``<img src>`` data URI, so the page is one self-contained file."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def load_template(name: str):
    """A template from ``torchboost/report/templates`` with autoescaping on."""
    import jinja2  # deferred: only the HTML report needs it, and it costs start-up time

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,  # a missing key is a bug, not an empty cell
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template(name)


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    return {**f, "speedup": fmt.speedup(f["expected_speedup"]), "measured_words": fmt.measured(f),
            "evidence_rows": [(k, fmt.evidence_value(k, v)) for k, v in f["evidence"].items()]}


def render_html(report: dict[str, Any], steps: Sequence[StepRecord]) -> str:
    """The HTML page for ``report`` (a build_report document); ``steps`` feed the timeline plot."""
    env_facts = report["facts"].get("env", {})
    return load_template(TEMPLATE_NAME).render(
        report=report,
        command=fmt.command(report["command"]),
        headline=fmt.headline(report),
        phases=[
            {"name": p, "label": fmt.PHASE_LABELS[p], "color": PHASE_COLORS[p],
             "ms": report["phase_ms"][p], "pct": report["breakdown_pct"][p], "lines": fmt.lines_under(report, p)}
            for p in fmt.shown_phases(report["phase_ms"])
        ],
        findings=[_finding(f) for f in report["findings"]],
        training_changes=[_finding(f) for f in report.get("training_changes", [])],
        memory_fixes=[{**_finding(f), "memory": fmt.memory_change(f["memory_ratio"]),
                       "cost": fmt.time_cost(f["expected_speedup"])} for f in report.get("memory_fixes", [])],
        hot_ops=fmt.hottest_ops(report),
        compile_lines=compile_lines(report.get("compile")),
        environment=[(k, fmt.value(env_facts[k])) for k in _ENV_KEYS if env_facts.get(k) not in (None, "")],
        breakdown_src=data_uri(breakdown_png(report["breakdown_pct"])),
        timeline_src=data_uri(timeline_png(list(steps))),
        roofline_src=_roofline_src(report.get("headroom")),
    )


def _roofline_src(headroom: dict[str, Any] | None) -> str:
    """The roofline plot's data URI; "" without a headroom or an operator to place."""
    if not headroom:
        return ""
    machine = headroom.get("machine") or {}
    png = roofline_png(headroom.get("ops") or [], headroom.get("peak_flops_per_s"), machine.get("bandwidth_bytes_per_s"),
                       roofs=machine.get("peak_flops_per_s") or {}, dtype=headroom.get("dtype") or "")
    return data_uri(png) if png else ""
