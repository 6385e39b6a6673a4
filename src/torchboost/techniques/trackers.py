"""An experiment tracker's calls in the loop, measured: a probe and no setting.

What a script logs (a TensorBoard histogram of every parameter, wandb's or MLflow's
metrics every step) is the user's to choose, so no ``torchboost.toml`` key turns it down
and ``run`` never touches it: the finding (``host.tracker``, :mod:`torchboost.diagnose._line_rules`)
says "log every N steps" in the script's words. What it costs is measured, though: the
line sampler sees the calls' own time on the training thread, and a tracker's background
writer slows the rest of the step besides; so the doctor's quick probe skips the calls of
a step (the function the script's line calls, found by its qualified name, made to return
``None`` for that step, then put back) and times that step against plain ones. Only in the
doctor's own run, whose writes are kept apart: what is logged there is no one's record.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from torchboost.evidence.findings import Finding
from torchboost.evidence.host_lines import HostLine
from torchboost.evidence.host_side import HostFacts
from torchboost.evidence.observed import Facts, StepRecord
from torchboost.evidence.rulekit import less_often, r
from torchboost.evidence.steps import line_view
from torchboost.techniques.registry import ProbeContext, QuickSwitch, Rule, Technique

__all__ = ["LOG_EVERY", "TECHNIQUE", "TRACKERS", "host_tracker", "tracker_switch"]

TRACKERS = ("torch.utils.tensorboard", "tensorboardX", "wandb", "mlflow", "aim", "clearml", "comet_ml", "neptune")
"""Modules of experiment trackers, by their import names."""
LOG_EVERY = 10
"""How many times less often the fix proposes to log (and the line rules assume a call runs)."""


def _owner(qualified: str) -> tuple[Any, str] | None:
    """(the object that holds it, its attribute name) for a function's qualified name
    (``torch.utils.tensorboard.writer.SummaryWriter.add_histogram``); None where it cannot
    be found again (a local function, a module not imported)."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name, None)
            if owner is None or "<locals>" in name:
                return None
        return (owner, parts[-1]) if callable(getattr(owner, parts[-1], None)) else None
    return None


def tracker_switch(ctx: ProbeContext) -> QuickSwitch | None:
    """The tracker's call the sampler found in the step, skipped for a step; None when the
    sampler saw none, or cannot find the function again."""
    line = next((line for line in ctx.host_lines if line.bucket == "other" and line.callee.startswith(TRACKERS)),
                None)
    found = _owner(line.callee) if line is not None else None
    if found is None:
        return None
    owner, name = found
    original: Callable[..., Any] = vars(owner).get(name, getattr(owner, name))

    def skip(*args: Any, **kwargs: Any) -> None:
        return None

    return QuickSwitch("host.tracker", f"{line.name} skipped", on=lambda: setattr(owner, name, skip),
                       off=lambda: setattr(owner, name, original))


def host_tracker(facts: Facts, *, tracker_pct: float = 5.0) -> Finding | None:
    """An experiment tracker's calls (TensorBoard, wandb, MLflow...) take ``tracker_pct``
    percent of the step or more, all its lines together: log every N steps. No setting:
    the logs are the user's (the quick probe measures what skipping them gives)."""
    rows, step_ms = line_view(facts)
    rows = [x for x in rows if x["bucket"] == "other" and not x["loop_call"]]
    calls = [x for x in rows if x["callee"].startswith(TRACKERS)]
    if not calls:
        return None
    name = calls[0]["name"]
    same = [x for x in calls if x["name"] == name]  # one call of the tracker's, at each of its lines
    ms, pct = sum(x["ms"] for x in same), sum(x["pct"] for x in same)
    if pct < tracker_pct:
        return None
    lines = ", ".join(x["where"] for x in same[:4]) + (f" and {len(same) - 4} more" if len(same) > 4 else "")
    via = f" (from {same[0]['via']})" if same[0]["via"] else ""
    speedup, formula = less_often(step_ms, ms, LOG_EVERY)
    return Finding(
        id="host.tracker",
        title=f"{lines}{via} {name} takes {pct:.0f}% of the step ({ms:.1f} ms): log it every {LOG_EVERY} steps",
        evidence={"line": same[0]["where"], "lines": [x["where"] for x in same], **({"from": same[0]["via"]}
                  if same[0]["via"] else {}), "callee": same[0]["callee"], "line_ms_per_step": r(ms),
                  "line_pct": r(pct, 1), "step_ms": r(step_ms)},
        advice=f"the tracker's calls are the script's: log every {LOG_EVERY} steps (histograms and images every "
               "few hundred), not every step",
        advice_code=f"if step % {LOG_EVERY} == 0:  # at {same[0]['via'] or same[0]['where']}\n    {same[0]['code']}",
        expected_speedup=speedup,
        formula=f"{formula}; P ms of {name} per step at its {len(same)} line(s), called {LOG_EVERY}x less often "
                "(assumed)",
        notes=["What the tracker records is the user's to choose; torchboost changes none of it. Histograms of "
               "every parameter and gradient are the dearest: each copies and bins the whole tensor."],
    )


def _example() -> Facts:
    callee = "torch.utils.tensorboard.writer.SummaryWriter.add_histogram"
    lines = [HostLine("other", "/home/me/train.py", line, "writer.add_histogram(name, p, step)", callee,
                      {i: 28.0 for i in range(5, 25)}, via="train.py:40") for line in (33, 34)]
    steps = [StepRecord(i, 60.0, forward_ms=2.0, backward_ms=2.0, optimizer_ms=0.5) for i in range(5, 25)]
    return Facts(steps=steps, warmup_steps=5, host=HostFacts(lines=lines, line_interval_ms=10.0))


TECHNIQUE = Technique(
    name="trackers",
    title="an experiment tracker's calls (measured only: the logs are the script's)",
    after=("gc",),
    placed="no setting: nothing is applied, the doctor's probe only measures",
    rules=(Rule("host.tracker", host_tracker, example=_example),),
    quick_probe=tracker_switch,
)
