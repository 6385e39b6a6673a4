"""The report's line view: the user's lines where the step's time went, over the typical steps.

The phase table shows, under each phase, the lines that take at least
:data:`~torchboost.evidence.host_lines.LINE_SHARE_PCT` of the step (``shown``); the
report keeps every sampled line (``lines``), each with its milliseconds a step over the
same typical steps the phase table averages (:func:`~torchboost.evidence.steps.line_view`),
so that a phase's lines add up to at most its row.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from torchboost.evidence.host_lines import LINE_SHARE_PCT
from torchboost.evidence.observed import Facts
from torchboost.evidence.steps import line_view

__all__ = ["host_lines_section", "editor_link"]


def host_lines_section(facts: Facts) -> dict[str, Any] | None:
    """``{"interval_ms", "step_ms", "shown": [rows], "lines": [rows]}`` for report.json, or
    None when the lines were not sampled. Rows are :func:`~torchboost.evidence.steps.line_view`'s
    with an ``href`` each (:func:`editor_link`)."""
    host = facts.host
    if host is None or host.line_interval_ms is None:
        return None
    rows, step_ms = line_view(facts)
    every = [{**row, "href": editor_link(row["file"], row["line"])} for row in rows]
    return {"interval_ms": host.line_interval_ms, "step_ms": step_ms,
            "shown": [row for row in every if row["pct"] >= LINE_SHARE_PCT and not row["loop_call"]], "lines": every}


def editor_link(file: str, line: int) -> str:
    """A link that opens ``file`` at ``line`` in an editor that registers the ``vscode://``
    scheme (VS Code and its kin); the file's own ``file://`` address is beside it in the page."""
    return f"vscode://file{quote(file)}:{line}"
