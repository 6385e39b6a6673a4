"""The doctor report's ``compile`` section: what torch.compile cost and why it broke or recompiled.

One set of words (:func:`compile_lines`) for the terminal, Markdown and HTML; the figures
in ``report.json["compile"]`` (:func:`compile_section`, ``None`` when nothing compiled).
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from torchboost.evidence.observed import Facts
from torchboost.techniques.compile.compile_facts import CompileFacts, to_json

__all__ = ["compile_lines", "compile_section", "short_path"]


def short_path(where: str) -> str:
    """``file:line`` relative to the current folder when it lies under it."""
    path, _, line = where.rpartition(":")
    if not path:
        return where
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        rel = path
    return f"{path if rel.startswith('..') else rel}:{line}"


def compile_section(facts: Facts) -> dict[str, Any] | None:
    """report.json's ``compile``: CompileFacts' figures, the first step (where a model
    compiled before training compiles) and the compiled steps' median; None without a compile."""
    seen = facts.seen(CompileFacts)
    if not seen.frames:
        return None
    steps = [s.total_ms for s in facts.steps]
    return {**to_json(seen),
            "first_step_ms": round(facts.warmup_step_ms[0], 1) if facts.warmup_step_ms else None,
            "step_ms": round(statistics.median(steps), 3) if steps else None}


def _cost_line(section: dict[str, Any]) -> str:
    cache = section["cache"]
    cache_words = {"cold": f"a cold cache ({section['cache_misses']} graphs compiled from scratch, "
                           f"{section['cache_hits']} from the cache)",
                   "warm": f"a warm cache (all {section['cache_hits']} graphs from the cache)"}.get(cache, "no cache use seen")
    first = section.get("first_step_ms")
    steps = (f"; first step {first / 1000:.1f} s, compiled step {section['step_ms']:.1f} ms (median)"
             if first is not None and section.get("step_ms") is not None else "")
    return (f"torch.compile: {section['compile_s']:.1f} s compiling (tracing {section['tracing_s']:.1f} s, "
            f"backend {section['backend_s']:.1f} s of which code generation {section['code_gen_s']:.1f} s), "
            f"{cache_words}; {section['graphs']} graph(s) from {section['frames']} compiled frame(s){steps}.")


def compile_lines(section: dict[str, Any] | None) -> list[str]:
    """The section in words: the cost, then each graph break and each recompiling function."""
    if section is None:
        return []
    lines = [_cost_line(section)]
    for gb in section["graph_breaks"]:
        lines.append(f"Graph break at {short_path(gb['where'])} `{gb['code']}`: {gb['reason']}. "
                     f"Fix: {gb['fix']}.")
    limit = section.get("recompile_limit") or 0
    for rc in section["recompiles"]:
        capped = (f"; it hit the recompile limit ({limit}) and runs uncompiled from then on"
                  if limit and rc["count"] >= limit else "")
        lines.append(f"Recompiled {rc['function']} ({short_path(rc['where'])}) {rc['count']} time(s) on "
                     f"{rc['kind']}: {'; '.join(rc['reasons'])}{capped}. Fix: {rc['fix']}.")
    if not section["graph_breaks"] and not section["recompiles"]:
        lines.append("No graph break and no recompile.")
    return lines
