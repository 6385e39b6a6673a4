"""Rules over the user's own lines: where the time outside the loop's phases went, by name.

The line sampler gives each of the user's lines its milliseconds a step
(:func:`~torchboost.evidence.steps.line_view`). A known culprit has a rule of its own, its
fix in the script's words: garbage collection called in the loop (a technique of its own,
:mod:`torchboost.techniques.gc_calls`: a quick probe measures it, ``[gc] every`` applies
it), an experiment tracker's calls
(:func:`host_tracker`: TensorBoard, wandb, MLflow; the user's logs are theirs, so no
setting, but a quick probe of :mod:`torchboost.techniques.trackers` measures them), a host-device sync on the GPU (:func:`host_sync`: ``.item()``, ``.cpu()``,
``torch.cuda.synchronize()``, ``torch.cuda.empty_cache()``). Any other line of the step's
own code that takes a large share is named with its cost (:func:`host_line`). Each reads
the rows of the time outside the loop's phases ("other"); registered in
:data:`torchboost.diagnose.rules.RULES`.
"""

from __future__ import annotations

import re
from typing import Any

from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.rulekit import less_often, r, view
from torchboost.evidence.steps import line_view
from torchboost.techniques.gc_calls import host_gc
from torchboost.techniques.trackers import LOG_EVERY, host_tracker

__all__ = ["LOG_EVERY", "host_line", "host_sync"]

_SYNC = re.compile(r"\.item\s*\(|\.cpu\s*\(|\.tolist\s*\(|cuda\.synchronize\s*\(|cuda\.empty_cache\s*\(")


def _rows(facts: Facts, bucket: str = "other") -> tuple[list[dict[str, Any]], float]:
    """The lines of ``bucket`` that are the script's own work (not the loop's call of a phase)."""
    rows, step_ms = line_view(facts)
    return [row for row in rows if row["bucket"] == bucket and not row["loop_call"]], step_ms


def _evidence(row: dict[str, Any], step_ms: float) -> dict[str, Any]:
    return {"line": f"{row['where']}", "code": row["code"], **({"from": row["via"]} if row["via"] else {}),
            "line_ms_per_step": r(row["ms"]), "line_pct": r(row["pct"], 1), "step_ms": r(step_ms)}


def host_sync(facts: Facts, *, sync_pct: float = 5.0) -> Finding | None:
    """On a GPU, a line that waits for the device (``.item()``, ``.cpu()``, ``.tolist()``,
    ``torch.cuda.synchronize()``, ``torch.cuda.empty_cache()``) takes ``sync_pct`` percent of
    the step or more: read the value every N steps, drop the call."""
    if view(facts).device != "cuda":
        return None
    rows, step_ms = _rows(facts)
    row = next((x for x in rows if _SYNC.search(x["code"]) and x["pct"] >= sync_pct), None)
    if row is None:
        return None
    speedup, formula = less_often(step_ms, row["ms"], LOG_EVERY)
    return Finding(
        id="host.sync",
        title=f"{row['where']} waits for the GPU {row['pct']:.0f}% of the step ({row['ms']:.1f} ms): read the "
              f"value every {LOG_EVERY} steps",
        evidence=_evidence(row, step_ms),
        advice="the line makes the host wait for the device's queue to drain; read values every few steps, keep "
               "running sums on the device, and drop torch.cuda.synchronize() and empty_cache() from the loop",
        advice_code=(f"running = running + loss.detach()  # on the device, no wait\nif step % {LOG_EVERY} == 0:\n"
                     f"    print(running.item() / {LOG_EVERY}); running.zero_()"),
        expected_speedup=speedup,
        formula=f"{formula}; P ms the line waits per step, {LOG_EVERY}x less often (assumed)",
        notes=["The wait is the device's work queued before it: without the sync it overlaps the next steps' "
               "host work rather than vanishing; the doctor's GPU timeline shows how much."],
    )


def host_line(facts: Facts, *, line_pct: float = 10.0) -> Finding | None:
    """Any other line of the script's own that takes ``line_pct`` percent of the step or
    more outside the loop's phases: named with its cost."""
    known = [host_gc, host_tracker, host_sync]  # the culprits named by their own findings
    taken = {line for f in (rule(facts) for rule in known) if f is not None
             for line in f.evidence.get("lines", [f.evidence.get("line")])}
    rows, step_ms = _rows(facts)
    row = next((x for x in rows if x["pct"] >= line_pct and x["where"] not in taken), None)
    if row is None:
        return None
    speedup, formula = less_often(step_ms, row["ms"], LOG_EVERY)
    call = f" ({row['name']})" if row["callee"] else ""
    via = f", from {row['via']}" if row["via"] else ""
    return Finding(
        id="host.line",
        title=f"{row['where']} takes {row['pct']:.0f}% of the step ({row['ms']:.1f} ms) outside forward, backward "
              f"and the optimizer: `{row['code']}`{call}{via}",
        evidence={**_evidence(row, step_ms), **({"callee": row["callee"]} if row["callee"] else {})},
        advice="the line is the script's own work in every step: run it less often, or make it cheaper",
        advice_code=f"if step % {LOG_EVERY} == 0:  # at {row['where']}\n    {row['code']}",
        expected_speedup=speedup,
        formula=f"{formula}; P ms of this line per step, {LOG_EVERY}x less often (assumed: what it may be run "
                "less often is the script's to say)",
        notes=["Sampled: the line's time is the share of looks at the training thread that found it there, "
               "over the typical steps."],
    )
