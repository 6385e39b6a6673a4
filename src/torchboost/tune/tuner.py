"""Tune a user's script end to end: diagnose, search with real trials, write torchboost.toml.

This is the only part of tuning that runs processes; the search it drives
(:mod:`torchboost.tune.search`) is pure.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from torchboost import _json as strict_json
from torchboost._io import atomic_write_bytes
from torchboost.config import BoostConfig, Overlay
from torchboost.diagnose import diagnose
from torchboost.diagnose.headroom import limits_device, step_dtype
from torchboost.limits import machine_limits
from torchboost.plan import Bursts, Plan
from torchboost.techniques.fp32_math import fp32_matmul_dtype
from torchboost.techniques.precision import autocast_dtype
from torchboost.evidence.observed import Facts
from torchboost.process.launch import parse_launch
from torchboost.process.guard.run_guard import summed_writes
from torchboost.observe.parent.request import RunRequest
from torchboost.observe.parent.supervise import run_observed
from torchboost.tune.search.coverage import CoverageNotes
from torchboost.tune.config_file import settings_to_config, user_config, write_config
from torchboost.tune.budget import ENDING_S, TuneBudget
from torchboost.tune.ending import check_reserve, toml_header, verify_outcome, write_result
from torchboost.tune.run_data import TuneOptions, TuneRun
from torchboost.tune.trials.journal import Journal, identity
from torchboost.tune.search.levers import TuneContext, default_levers, order_levers, techniques_context
from torchboost.tune.search.probe_order import measured_from_facts
from torchboost.tune.search.memory_limit import default_memory_limit
from torchboost.tune.search import Decision, SearchOptions, TuneOutcome, run_search
from torchboost.tune.trials.trial import TrialRequest, failure_words, last_traceback, run_trial
from torchboost.tune.trials.trial_length import (BURST_TRIAL_STEPS, BURST_WARMUP, DIAGNOSIS_RECORD_S, DIAGNOSIS_STEPS,
                                                 MIN_TRIAL_STEPS, auto_trial_steps)
from torchboost.tune.trials.trial_result import TrialResult

__all__ = ["TuneOptions", "TuneRun", "tune_script", "context_from_facts", "settings_to_config", "toml_header",
           "user_config", "write_config"]


def context_from_facts(facts: Facts) -> TuneContext:
    """What the search needs to know about the machine and script, from the doctor's facts:
    the generic facts here, each technique's own from its descriptor's hook."""
    env = facts.env or {}
    return TuneContext(
        device=str(env.get("device", "cpu")),
        cpu_cores=int(env.get("cpu_cores", 1)),
        step_ms=statistics.fmean(s.total_ms for s in facts.steps) if facts.steps else None,
        planned_steps=facts.planned_steps,
        has_loader=facts.loader is not None,
        has_optimizer=facts.optimizer is not None,
        uses_booster=bool(getattr(facts, "uses_booster", False)),
        memory_limit_bytes=default_memory_limit(env),
        peak_memory_bytes=int(facts.peak_memory_bytes or 0),
        techniques=dict(facts.techniques),
        measured=measured_from_facts(facts), random_ops=tuple(facts.random_ops),
        tuning=techniques_context(facts),
    )


def _journaled_measure(journal: Journal, command: Sequence[str], options: TuneOptions, base: BoostConfig,
                       on_trial: Callable[[Overlay, int, TrialResult | None], None] | None):
    trials_dir = options.out_dir / "trials"

    def measure(settings: Overlay, repeat: int, slower_than_ms: float | None = None,
                decide: tuple[float, float] | None = None, bursts: Bursts | None = None,
                limit_s: float | None = None) -> TrialResult:
        """One trial; ``limit_s``: the seconds the tune's budget grants it (the trial is ended
        there rather than run into the time kept for the end-to-end check)."""
        recorded = journal.lookup(settings, repeat, bursts.change if bursts else None)
        if recorded is not None:
            return recorded
        granted_s = math.inf if limit_s is None else limit_s
        if granted_s < 1.0:  # the budget has no second left for it: not started, said as one it ended
            return TrialResult(settings=settings, repeat=repeat, ok=False, error=_past_budget(options, "no time was"))
        if on_trial is not None:
            on_trial(settings, repeat, None)
        steps = BURST_TRIAL_STEPS if bursts else options.steps_per_trial
        timeout_s = min(options.trial_timeout_s, max(options.budget_s, options.stall_timeout_s + 10), granted_s)
        # A burst trial's figures are its bursts: its warm-up only readies them (its first
        # switched step is set aside too); 5 steps of 4 s were 20 s of each such trial.
        warmup = min(options.warmup, BURST_WARMUP) if bursts else options.warmup
        # The one place the search's settings meet the user's configuration: resolved once
        # into the plan the trial's process applies, a burst trial's switches with them.
        result = run_trial(TrialRequest(
            command=command, settings=settings, repeat=repeat, plan=Plan.tuned(settings, base, bursts), steps=steps,
            warmup=warmup, out_dir=trials_dir / "current", timeout_s=timeout_s, slower_than_ms=slower_than_ms,
            stall_timeout_s=options.stall_timeout_s, writes_ledger=options.writes_ledger, decide=decide))
        if not result.ok and timeout_s == granted_s and (result.error or "").startswith("timed out"):
            result.error = _past_budget(options, f"{granted_s:.0f} s were")
        journal.append(result)
        if on_trial is not None:
            on_trial(settings, repeat, result)
        return result

    return measure


def _past_budget(options: TuneOptions, left: str) -> str:
    """Why a trial the budget ended failed, and what to do (``left``: the time it was given)."""
    return (f"ran past the end of --budget {options.budget_s:.0f} s and its slack, less the time kept for the "
            f"end-to-end check ({left} left for this trial): give tune a larger --budget")


def _noted(coverage: CoverageNotes, result: TrialResult) -> TrialResult:
    coverage.record(result)
    return result


def _peak(facts: Facts | None, settings: Overlay) -> dict[str, Any]:
    """The probe's peak for the diagnosed step's dtype, and for the dtype the written
    ``settings`` compute in (cached per machine; measured once, after the trials); nothing
    when there is no FLOP count to set against it."""
    device = limits_device(facts) if facts is not None else None
    if facts is None or not facts.flops_per_step or device is None:  # None: MPS, whose peak is not probed
        return {}
    try:
        limits, _ = machine_limits(device, facts.cpu_threads if device == "cpu" else None)
    except Exception:  # noqa: BLE001 - the report goes without MFU
        return {}
    dtype = step_dtype(facts)
    if not limits.peak_flops_per_s(dtype):
        dtype = "fp32"
    after = _tuned_dtype(dtype, settings)
    if not limits.peak_flops_per_s(after):
        after = dtype
    return {"peak_flops_per_s": limits.peak_flops_per_s(dtype), "peak_dtype": dtype,
            "after_peak_flops_per_s": limits.peak_flops_per_s(after), "after_peak_dtype": after}


def _tuned_dtype(dtype: str, settings: Overlay) -> str:
    """The dtype a step of ``dtype`` computes its matmuls in under ``settings``: autocast's
    (bf16, fp16), else bf16 or TF32 math in fp32 matmuls, else ``dtype``."""
    fp32_math = fp32_matmul_dtype(settings) if dtype in ("fp32", "tf32") else None
    return autocast_dtype(settings) or fp32_math or dtype


def _doctor_facts(command: Sequence[str], options: TuneOptions,
                  budget: TuneBudget | None = None) -> tuple[Facts | None, TrialResult | None]:
    """The doctor's facts, and, when the diagnosis itself failed (crashed, stalled, killed,
    or ran past --budget), that failure as a failed baseline: the search cannot start."""
    doctor_dir = options.out_dir / "doctor"
    facts_path = doctor_dir / "facts.json"
    if options.resume and facts_path.is_file():
        return Facts.from_dict(strict_json.loads(facts_path.read_text(encoding="utf-8"))), None
    # --budget bounds the diagnosis too: a script too slow to show its steps within it
    # leaves the search nothing to start from.
    observed = run_observed(RunRequest(
        command=command, steps=options.steps_per_trial or DIAGNOSIS_STEPS, warmup=options.warmup,
        record_s=None if options.steps_per_trial else DIAGNOSIS_RECORD_S, out_dir=doctor_dir, echo=False,
        timeout_s=options.budget_s if budget is None else budget.grant(options.budget_s),
        stall_timeout_s=options.stall_timeout_s,
        writes_ledger=options.writes_ledger))
    facts = observed.facts
    if observed.timed_out:  # the script did not fail: the budget ended it
        seen = observed.steps_seen
        ran = "no step" if not seen else f"{seen} step" if seen == 1 else f"{seen} steps"
        why = (f"the diagnosis did not finish within --budget {options.budget_s:.0f} s (the script's start-up, "
               f"{options.warmup} warm-up steps and the observed steps; it had run {ran} by then): "
               "give tune a larger --budget")
    elif facts is None or not facts.steps or observed.exit_code != 0:
        own = facts is not None and bool((facts.stall or {}).get("own"))  # torchboost's work, not the script's
        why = ("the diagnosis could not finish: " if own else "the baseline run failed: ") + failure_words(
            facts, observed.exit_code, observed.stderr_tail, "no training step completed")
    else:
        return facts, None
    return facts, TrialResult(settings=Overlay(), ok=False, error=why, traceback=last_traceback(observed.stderr_tail))


def _failed_run(facts: Facts | None, baseline: TrialResult, base: BoostConfig) -> TuneRun:
    error = baseline.error
    outcome = TuneOutcome(baseline=baseline, settings=Overlay(), waterfall=[], decisions=[], trials_run=0,
                          elapsed_s=0.0, error=error)
    return TuneRun(facts=facts, findings=[], outcome=outcome, config=base, run_steps=None, reused_trials=0, base=base)


def _planned_run(options: TuneOptions, facts: Facts | None) -> tuple[int | None, str]:
    """The planned run's length in steps, and how it was known."""
    if options.run_steps is not None:
        return options.run_steps, "given with --run-steps"
    if facts is not None and facts.planned_steps:
        source = facts.planned_from or "one epoch of the script's DataLoader"
        count = "" if source.endswith(str(facts.planned_steps)) else f" ({facts.planned_steps} steps)"
        return facts.planned_steps, f"{source}{count}; pass --run-steps if the script runs more"
    return None, ("unknown: no Trainer, no --max_iters, --max-steps or --epochs among the script's arguments, "
                  "no DataLoader with a length; pass --run-steps")


def _trial_length(options: TuneOptions, facts: Facts | None, run_steps: int | None) -> TuneOptions:
    if options.steps_per_trial is not None:
        return options
    # Sized on the planned run (--run-steps, else the doctor's estimate): a script that
    # loops over its loader for a fixed number of steps runs more than one epoch.
    steps = facts.steps if facts is not None else []
    step_ms = statistics.fmean(s.total_ms for s in steps) if steps else None
    data_pct = 100.0 * sum(s.data_ms for s in steps) / max(sum(s.total_ms for s in steps), 1e-9) if steps else 100.0
    return dataclasses.replace(options, steps_per_trial=auto_trial_steps(step_ms, planned_steps=run_steps,
                                                                         warmup=options.warmup, data_wait_pct=data_pct))


def _write_outcome(path: Path, command: Sequence[str], outcome: TuneOutcome, run_steps: int | None,
                   options: TuneOptions, reused: int) -> None:
    summary = {
        "command": list(command),
        "run_steps": run_steps,
        "settings": outcome.settings.to_dict(),
        "speedup": outcome.speedup,
        "trials_run": outcome.trials_run,
        "steps_per_trial": options.steps_per_trial,
        "reused_trials": reused,
        "error": outcome.error,
        "decisions": [{**dataclasses.asdict(d), "settings": d.settings.to_dict()} for d in outcome.decisions],
        "waterfall": [{**dataclasses.asdict(w), "settings": w.settings.to_dict()} for w in outcome.waterfall],
    }
    atomic_write_bytes(path, strict_json.dumps(summary, indent=2, default=str).encode())


def _identity(command: Sequence[str]) -> dict[str, Any]:
    # A module run (-m) is hashed too: its file is found on the path without importing it.
    return identity(command, parse_launch(command).script)


def _context(facts: Facts | None, options: TuneOptions) -> TuneContext:
    """The search's context from the doctor's facts, --memory-limit in place of the device's default."""
    context = context_from_facts(facts) if facts is not None else TuneContext()
    if options.memory_limit_bytes is not None:
        context = dataclasses.replace(context, memory_limit_bytes=options.memory_limit_bytes)
    return context


def _prepare_out_dir(options: TuneOptions) -> None:
    options.out_dir.mkdir(parents=True, exist_ok=True)
    if not options.resume:
        options.writes_ledger.unlink(missing_ok=True)  # an earlier tune's; --resume adds to it


def tune_script(
    command: Sequence[str],
    options: TuneOptions = TuneOptions(),
    *,
    on_trial: Callable[[Overlay, int, TrialResult | None], None] | None = None,
    on_decision: Callable[[Decision], None] | None = None,
    on_verify: Callable[[str, int], None] | None = None,
    facts: Facts | None = None,
    spent_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
) -> TuneRun:
    """Diagnose (unless ``facts`` of a doctor run are given), search on top of the user's
    own ``options.config_path`` (when there is one), write the winner there. ``spent_s``:
    seconds already spent on this tune before the call (the process's start, the doctor run
    of ``facts``), counted in ``options.budget_s``. The tune's time is one
    :class:`~torchboost.tune.budget.TuneBudget` on ``clock``, made here, which every part asks."""
    base = user_config(options.config_path)
    _prepare_out_dir(options)
    budget = TuneBudget(options.budget_s, clock=clock, spent_s=spent_s, check_most_s=options.verify_budget_s,
                        ending_s=ENDING_S)
    if facts is None:
        facts, failed = _doctor_facts(command, options, budget)
        if failed is not None:
            return _failed_run(facts, failed, base)
    diagnosis_s = budget.elapsed_s()  # the doctor run of ``facts`` included (``spent_s``)
    findings = diagnose(facts) if facts is not None and facts.steps else []
    context = _context(facts, options)
    # The estimates: a probe's own ratio orders its lever where its pairs agree (order_levers);
    # pairs that disagree on a busy machine measured nothing the search should order by.
    levers = order_levers(default_levers(), {f.id: f.expected_speedup for f in findings}, context.measured)
    run_steps, run_steps_source = _planned_run(options, facts)
    options = _trial_length(options, facts, run_steps)
    ident = _identity(command)
    journal = Journal(options.out_dir / "journal.jsonl", resume=options.resume, ident=ident)
    # The diagnosis spent part of the budget: the search has the rest, and the budget keeps
    # the end-to-end check's time from it.
    search_options = SearchOptions(budget_s=budget.search_s(), min_gain=options.min_gain,
                                   max_repeats=options.max_repeats, run_steps=run_steps,
                                   trial_steps=options.steps_per_trial or MIN_TRIAL_STEPS, bursts=True)
    # What a lever with a long fixed cost (max-autotune's compile) needs to know it can pay.
    context = dataclasses.replace(context, planned_steps=run_steps, budget_s=search_options.budget_s)
    coverage, measure = CoverageNotes(), _journaled_measure(journal, command, options, base, on_trial)
    outcome = run_search(levers, context, lambda *a, **k: _noted(coverage, measure(*a, **k)), search_options,
                         on_decision=on_decision, reserve=check_reserve(options, budget), budget=budget)
    coverage.annotate(outcome.decisions)  # what a change applied at the root covered
    if journal.restarted:
        outcome.warnings.append(f"--resume started afresh: {journal.restarted}")
    checking = budget.elapsed_s()
    settings, e2e, verdict = verify_outcome(command, options, base, outcome, run_steps, on_verify, ident,
                                            budget=budget.for_check())
    run = TuneRun(facts=facts, findings=findings, outcome=outcome, config=settings_to_config(settings, base),
                  run_steps=run_steps, run_steps_source=run_steps_source, reused_trials=journal.reused,
                  steps_per_trial=options.steps_per_trial,
                  base=base, end_to_end=e2e, verdict=verdict, writes=summed_writes(options.writes_ledger),
                  budget_s=options.budget_s, **_peak(facts, settings))
    write_result(command, options, run)
    run.spent_s = {"diagnosis": diagnosis_s, **outcome.spent_s, "check": budget.elapsed_s() - checking,
                   "total": budget.elapsed_s()}
    _write_outcome(options.out_dir / "outcome.json", command, outcome, run_steps, options, journal.reused)
    return run

