"""Two ways of running a script, compared as the end-to-end check compares them.

Each side is a command as the user runs it, or one command with a ``torchboost.toml`` of
its own applied through ``torchboost run``. Both run in alternating pairs of whole
processes (A B, B A, ...) under the write guard, more pairs while the verdict is open and
the budget allows (:mod:`.check`); the interval and the verdict are the end-to-end check's
(:class:`~torchboost.tune.verify.end_to_end.EndToEnd`). Their losses are compared the way
tune judges a candidate: a short observed run of each (the same steps), held to fp32's
tolerance first, then bf16's, then the trend's (:mod:`torchboost.tune.search.parity`).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from torchboost.config import BoostConfig
from torchboost.handover import write_plan
from torchboost.observe.parent.request import RunRequest
from torchboost.observe.parent.supervise import run_observed
from torchboost.plan import Plan
from torchboost.tune.search.parity import EXACT, REDUCED, STATISTICAL, check_parity
from torchboost.tune.verify.check import _measure_pairs, _more_pairs, _whole_run, runs_budget
from torchboost.tune.verify.check_plan import EXTRA_PAIRS, VerifyPlan
from torchboost.tune.verify.end_to_end import EndToEnd

__all__ = ["Comparison", "Side", "compare", "loss_verdict"]

_PARITY_WORDS = {EXACT: "the same losses (within fp32's 1e-3 on the first steps)",
                 REDUCED: "losses within reduced precision's tolerance (the last ones within 2%)",
                 STATISTICAL: "the same loss trend (other random draws)"}


@dataclass(frozen=True)
class Side:
    """One way of running: ``command`` as is, or with the ``config`` file applied."""

    label: str
    command: Sequence[str]
    config: Path | None = None

    def words(self) -> str:
        run = " ".join(self.command)
        return f"{run} with {self.config}" if self.config is not None else run


@dataclass
class Comparison:
    """What :func:`compare` measured: the pairs (A as the baseline, B as the other side),
    the losses of a short observed run of each, and their parity in words."""

    a: Side
    b: Side
    runs: EndToEnd
    losses: dict[str, list[float]] = field(default_factory=dict)
    parity: str = ""
    """Which of tune's tolerances B's losses keep against A's, in words ("" when not checked)."""
    parity_ok: bool | None = None

    def verdict(self, min_gain: float) -> str:
        """B against A in words: faster or slower with its interval, else no proven win."""
        runs = self.runs
        if runs.error is not None:
            return f"no verdict: {runs.error}"
        if not runs.pairs:
            return "no verdict: no pair of runs finished within the budget"
        if runs.faster(min_gain):
            return f"{self.b.label} is faster: {runs.words()} of {self.a.label}'s speed"
        swapped = EndToEnd(baseline_runs_s=runs.tuned_runs_s, tuned_runs_s=runs.baseline_runs_s)
        if swapped.faster(min_gain):
            return f"{self.a.label} is faster: {swapped.words()} of {self.b.label}'s speed"
        return (f"no proven win: {self.b.label} ran at {runs.words()} of {self.a.label}'s speed; the interval "
                f"does not clear {min_gain:.0%} either way")

    def to_dict(self, min_gain: float) -> dict[str, object]:
        return {"a": self.a.words(), "b": self.b.words(), "verdict": self.verdict(min_gain),
                "end_to_end": self.runs.to_dict(), "parity": self.parity, "parity_ok": self.parity_ok,
                "losses": self.losses}


def loss_verdict(a: list[float], b: list[float]) -> tuple[bool, str]:
    """B's losses against A's under tune's tolerances, strictest first: (kept one, in words)."""
    for kind in (EXACT, REDUCED, STATISTICAL):
        verdict = check_parity(a, b, kind=kind)
        if verdict.ok:
            return True, _PARITY_WORDS[kind]
    return False, f"losses that differ beyond every tolerance tune uses ({check_parity(a, b, kind=STATISTICAL).detail})"


def _plan(side: Side) -> Plan | None:
    """The side's configuration, read once and resolved once (None: its command as is)."""
    return Plan.of(BoostConfig.from_toml(side.config)) if side.config is not None else None


def _config_file(label: str, plan: Plan | None, folder: Path) -> Path | None:
    """A copy of a side's configuration with the JSON hand-over ``torchboost run`` reads beside it."""
    if plan is None:
        return None
    path = folder / f"{label}.toml"
    plan.config.to_toml(path)
    write_plan(path.with_suffix(".json"), plan)
    return path


def _losses(side: Side, plan: Plan | None, steps: int, out_dir: Path) -> list[float]:
    """The losses of a short observed run of ``side`` under its ``plan`` (warm-up included),
    or [] when it failed."""
    observed = run_observed(RunRequest(command=side.command, steps=steps, warmup=0, out_dir=out_dir, apply=plan,
                                       profile=False, echo=False))
    facts = observed.facts
    return list(facts.warmup_losses) + list(facts.losses) if facts is not None else []


def compare(a: Side, b: Side, *, pairs: int, budget_s: float, out_dir: Path, loss_steps: int = 30,
            min_gain: float = 0.03, on_run: Callable[[str, int], None] | None = None) -> Comparison:
    """A against B: ``pairs`` alternating pairs of whole runs (more while the verdict is open
    and ``budget_s`` allows, at most :data:`EXTRA_PAIRS` more), then each side's losses over ``loss_steps``
    observed steps, judged as tune judges a candidate. Raises RuntimeError when a side fails."""
    result = EndToEnd()
    plan = VerifyPlan(pairs=pairs, steps=None, run_limit_s=budget_s, fallback_steps=0, budget_s=budget_s,
                      max_pairs=pairs + EXTRA_PAIRS)
    plans = {side.label: _plan(side) for side in (a, b)}
    with tempfile.TemporaryDirectory(prefix="torchboost-compare-") as tmp:
        files = {"baseline": _config_file(a.label, plans[a.label], Path(tmp)),
                 "tuned": _config_file(b.label, plans[b.label], Path(tmp))}
        commands = {"baseline": a.command, "tuned": b.command}

        def run_one(name: str, pair: int) -> float | None:
            try:
                return _whole_run(commands[name], files[name], budget_s, out_dir / "whole")
            except RuntimeError as exc:
                label = a.label if name == "baseline" else b.label
                raise RuntimeError(f"{label} failed: {exc}") from None

        def said(name: str, pair: int) -> None:
            if on_run is not None:
                on_run(a.label if name == "baseline" else b.label, pair)

        try:
            budget = runs_budget(budget_s, result)  # a pair starts while the runs so far leave room for one
            _measure_pairs(result, pairs, run_one, said, budget=budget)
            _more_pairs(result, plan, run_one, said, min_gain, budget)
        except RuntimeError as exc:
            result.error = str(exc)
    comparison = Comparison(a, b, result)
    if result.error is None and loss_steps > 0:
        losses = {side.label: _losses(side, plans[side.label], loss_steps, out_dir / f"losses-{side.label}") for side in (a, b)}
        comparison.losses = losses
        if losses[a.label] and losses[b.label]:
            comparison.parity_ok, comparison.parity = loss_verdict(losses[a.label], losses[b.label])
        else:
            comparison.parity = "not checked: a side recorded no loss (its loop may not return one)"
    return comparison
