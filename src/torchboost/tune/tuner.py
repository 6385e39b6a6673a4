"""Tune a user's script end to end: diagnose, search with real trials, write torchboost.toml.

This is the only part of tuning that runs processes; the search it drives
(:mod:`torchboost.tune.search`) is pure.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from torchboost import _json as strict_json
from torchboost._io import atomic_write_bytes
from torchboost.config import BoostConfig, Overlay
from torchboost.diagnose import diagnose
from torchboost.diagnose.headroom import limits_device, step_dtype
from torchboost.limits import machine_limits
from torchboost.evidence.observed import Facts
from torchboost.observe.parent.launch import parse_launch
from torchboost.observe.guard.run_guard import summed_writes
from torchboost.observe.parent.request import RunRequest
from torchboost.observe.parent.supervise import run_observed
from torchboost.observe.spec import Bursts
from torchboost.tune.search.coverage import CoverageNotes
from torchboost.tune.config_file import TunedFor, settings_to_config, user_config, write_config
from torchboost.tune.trials.journal import Journal, RunJournal, identity
from torchboost.tune.search.levers import TuneContext, default_levers, order_levers, techniques_context
from torchboost.tune.search.probe_order import measured_from_facts
from torchboost.tune.search.memory_limit import default_memory_limit
from torchboost.tune.search import Decision, SearchOptions, TuneOutcome, run_search
from torchboost.tune.trials.trial import failure_words, last_traceback, run_trial
from torchboost.tune.trials.trial_length import (BURST_TRIAL_STEPS, DIAGNOSIS_RECORD_S, DIAGNOSIS_STEPS, MIN_TRIAL_STEPS,
                                          auto_trial_steps)
from torchboost.tune.trials.trial_result import TrialResult, describe_settings
from torchboost.tune.verify.end_to_end import EndToEnd, end_to_end_verdict, nothing_kept
from torchboost.tune.verify import plan_verification, reserve_s, shortest_run_s, verify

__all__ = ["TuneOptions", "TuneRun", "tune_script", "context_from_facts", "settings_to_config", "toml_header",
           "user_config", "write_config"]


@dataclass(frozen=True)
class TuneOptions:
    """How to tune; seconds and steps as named."""

    out_dir: Path = Path("torchboost-tune")
    config_path: Path = Path("torchboost.toml")
    budget_s: float = 600.0
    run_steps: int | None = None
    """Planned length of the real run in steps (compile amortisation); None: from the script."""
    steps_per_trial: int | None = None
    """Measured steps per trial; None: :func:`auto_trial_steps` from the doctor's step time."""
    warmup: int = 5
    resume: bool = False
    trial_timeout_s: float = 300.0
    stall_timeout_s: float = 60.0
    """No step for this long (or 20 median steps) ends a trial, or the doctor, as stalled."""
    min_gain: float = 0.03
    max_repeats: int = 3
    verify_pairs: int = 4
    """End-to-end pairs (baseline, tuned) after the search, at least the four a claim rests
    on; 0 skips the check (and then the figures are the search's per-step ones)."""
    verify_budget_s: float | None = None
    """Seconds the end-to-end check may take; None: half the budget, at least 60."""
    memory_limit_bytes: int | None = None
    """Peak memory a kept configuration must stay under, bytes; None: 90% of the device's
    memory, as the doctor saw it (:func:`torchboost.tune.search.memory_limit.default_memory_limit`)."""

    @property
    def writes_ledger(self) -> Path:
        """Where each run of the tune adds what the script wrote in the user's folders."""
        return self.out_dir / "writes.jsonl"


@dataclass
class TuneRun:
    """Everything a tuning run produced."""

    facts: Facts | None
    findings: list[Any]
    outcome: TuneOutcome
    config: BoostConfig
    run_steps: int | None
    reused_trials: int
    steps_per_trial: int | None = None
    """Measured steps each trial ran (chosen from the doctor's step time unless given)."""
    base: BoostConfig | None = None
    """The configuration the search started from: the user's torchboost.toml, or plain PyTorch."""
    run_steps_source: str = ""
    """How the planned run's length was known, in words."""
    end_to_end: EndToEnd | None = None
    """The tuned configuration against the baseline, end to end (None: not checked)."""
    verdict: str = ""
    """What the end-to-end check decided, in words."""
    peak_flops_per_s: float | None = None
    """The probe's matmul peak for the step's dtype (``peak_dtype``): MFU's denominator."""
    peak_dtype: str = "fp32"
    writes: dict[str, Any] | None = None
    """What the script wrote in the user's folders over the tune's runs (``summed_writes``)."""

    @property
    def settings(self) -> Overlay:
        """What was written: the search's kept settings, or none when the end-to-end check
        did not confirm them."""
        return Overlay.between(self.base or BoostConfig.off(), self.config)


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
        **techniques_context(facts),
    )


def toml_header(run: TuneRun, command: Sequence[str]) -> str:
    """Comment lines for torchboost.toml: what it was tuned for (the command, the script's
    hash: :class:`~torchboost.tune.config_file.TunedFor`), the verified figure, each kept change."""
    outcome = run.outcome
    lines = TunedFor.of(command).lines()
    if run.verdict:
        lines.append(run.verdict[0].upper() + run.verdict[1:] + ".")
    lines.append(f"Search: baseline {outcome.baseline.ms_per_step:.2f} ms/step; tuned "
                 f"{outcome.waterfall[-1].ms_per_step:.2f} ms/step ({outcome.speedup:.2f}x per step).")
    kept = [d for d in outcome.decisions if d.status == "kept"]
    for d in kept if run.settings else []:
        lines.append(f"kept {describe_settings(d.settings)}: {1 / d.ratio:.2f}x faster ({d.reason})")
    if kept and not run.settings:
        lines.append("the search's pick did not hold end to end: nothing changed")
    elif not kept:
        lines.append("no technique was faster beyond noise and still correct: nothing changed")
    if run.base is not None and run.base != BoostConfig.off():
        lines.append("Every other setting is the one this file had before (kept as torchboost.toml.bak).")
    return "\n".join(lines)


BUDGET_SLACK = 0.5
"""The whole tune, diagnosis, search and end-to-end check together, ends within
``--budget`` x (1 + this): the diagnosis and the search share the budget, the check has
what is left of the slack."""


def _journaled_measure(journal: Journal, command: Sequence[str], options: TuneOptions, base: BoostConfig,
                       on_trial: Callable[[dict[str, Any], int, TrialResult | None], None] | None,
                       deadline: float = math.inf):
    trials_dir = options.out_dir / "trials"

    def measure(settings: dict[str, Any], repeat: int, slower_than_ms: float | None = None,
                decide: tuple[float, float] | None = None, bursts: Bursts | None = None) -> TrialResult:
        recorded = journal.lookup(settings, repeat, bursts.change if bursts else None)
        if recorded is not None:
            return recorded
        if on_trial is not None:
            on_trial(settings, repeat, None)
        steps = BURST_TRIAL_STEPS if bursts else options.steps_per_trial
        left_s = max(deadline - time.monotonic(), 1.0)
        timeout_s = min(options.trial_timeout_s, max(options.budget_s, options.stall_timeout_s + 10), left_s)
        result = run_trial(command, settings, repeat, base=base, steps=steps, warmup=options.warmup,
                           out_dir=trials_dir / "current", timeout_s=timeout_s,
                           slower_than_ms=slower_than_ms, stall_timeout_s=options.stall_timeout_s,
                           writes_ledger=options.writes_ledger, decide=decide, bursts=bursts)
        if not result.ok and timeout_s == left_s and (result.error or "").startswith("timed out"):
            result.error = (f"ran past the end of --budget {options.budget_s:.0f} s and its slack ({left_s:.0f} s were "
                            "left for this trial): give tune a larger --budget")
        journal.append(result)
        if on_trial is not None:
            on_trial(settings, repeat, result)
        return result

    return measure


def _noted(coverage: CoverageNotes, result: TrialResult) -> TrialResult:
    coverage.record(result)
    return result


def _peak(facts: Facts | None) -> dict[str, Any]:
    """The probe's peak for the diagnosed step's dtype (cached per machine; measured once,
    after the trials); nothing when there is no FLOP count to set against it."""
    device = limits_device(facts) if facts is not None else None
    if facts is None or not facts.flops_per_step or device is None:  # None: MPS, whose peak is not probed
        return {}
    try:
        limits, _ = machine_limits(device, facts.cpu_threads if device == "cpu" else None)
    except Exception:  # noqa: BLE001 - the report goes without MFU
        return {}
    dtype = step_dtype(facts)
    peak = limits.peak_flops_per_s(dtype)
    return {"peak_flops_per_s": peak, "peak_dtype": dtype} if peak else {
        "peak_flops_per_s": limits.peak_flops_per_s("fp32"), "peak_dtype": "fp32"}


def _doctor_facts(command: Sequence[str], options: TuneOptions) -> tuple[Facts | None, TrialResult | None]:
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
        timeout_s=options.budget_s, stall_timeout_s=options.stall_timeout_s, writes_ledger=options.writes_ledger))
    facts = observed.facts
    if observed.timed_out:  # the script did not fail: the budget ended it
        why = (f"the diagnosis did not finish within --budget {options.budget_s:.0f} s (the script's start-up, "
               f"{options.warmup} warm-up steps and the observed steps): give tune a larger --budget")
    elif facts is None or not facts.steps or observed.exit_code != 0:
        why = "the baseline run failed: " + failure_words(facts, observed.exit_code, observed.stderr_tail,
                                                          "no training step completed")
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


def _whole_run_estimate(outcome: TuneOutcome, run_steps: int | None) -> float | None:
    """The baseline's whole run in seconds, from its trial (None: its length is unknown)."""
    if run_steps is None:
        return None
    return outcome.baseline.fixed_s + run_steps * outcome.baseline.ms_per_step / 1e3


def _verify(command: Sequence[str], options: TuneOptions, base: BoostConfig, outcome: TuneOutcome,
            run_steps: int | None, on_verify: Callable[[str, int], None] | None,
            ident: dict[str, Any], time_left_s: float = math.inf) -> tuple[Overlay, EndToEnd | None, str]:
    """The settings to write, the end-to-end figures, and the verdict in words; the check
    takes at most ``time_left_s`` (what --budget leaves), and is skipped, said so, when
    not even one pair of the baseline's runs fits."""
    if outcome.error is not None or not outcome.settings or options.verify_pairs < 1:
        return outcome.settings, None, "" if outcome.settings else nothing_kept(outcome)
    budget = min(_check_most_s(options), time_left_s)
    baseline = outcome.baseline  # its shortest end-to-end run: whole, or stopped after the fewest steps
    shortest_s = shortest_run_s(baseline.wall_s, baseline.fixed_s, baseline.ms_per_step,
                                trial_steps=options.steps_per_trial or MIN_TRIAL_STEPS, warmup=options.warmup)
    if budget < 2 * max(shortest_s, 1.0):
        return outcome.settings, None, (f"not verified end to end: --budget left {max(budget, 0):.0f} s, not enough "
                                        "for one pair of runs; the figures are the search's per step")
    plan = plan_verification(pairs=options.verify_pairs, budget_s=budget,
                             step_ms=outcome.waterfall[-1].ms_per_step, fixed_s=outcome.baseline.fixed_s,
                             trial_steps=options.steps_per_trial or MIN_TRIAL_STEPS, warmup=options.warmup,
                             whole_run_s=_whole_run_estimate(outcome, run_steps), planned_steps=run_steps,
                             baseline_ms=baseline.ms_per_step)
    journal = RunJournal(options.out_dir / "verify.jsonl", resume=options.resume, ident=ident)
    e2e = verify(command, base, outcome.settings, plan, out_dir=options.out_dir / "verify", on_run=on_verify,
                 journal=journal, min_gain=options.min_gain, writes_ledger=options.writes_ledger)
    settings, verdict = end_to_end_verdict(outcome.settings, outcome.decisions, e2e, options.min_gain)
    return settings, e2e, verdict


def _check_reserve(options: TuneOptions) -> Callable[[TrialResult], float] | None:
    """The seconds the search keeps for the end-to-end check, from the baseline's trial (at
    most half of the whole tune's time); None when there is no check."""
    if options.verify_pairs < 1:
        return None
    most_s = _check_most_s(options)
    return lambda baseline: reserve_s(baseline.wall_s, baseline.fixed_s, baseline.ms_per_step,
                                      trial_steps=options.steps_per_trial or MIN_TRIAL_STEPS,
                                      warmup=options.warmup, most_s=most_s)


def _check_most_s(options: TuneOptions) -> float:
    """The most the end-to-end check may take: half the whole tune's time (--budget and its
    slack), or ``verify_budget_s`` when set. The search's reserve and the check's own budget
    are both this: a check given less than was reserved for it (it had --budget x 0.5, the
    reserve half of 1.5x) ran three of the four pairs kept for it on a 1 s-step transformer."""
    most_s = options.budget_s * (1 + BUDGET_SLACK) / 2
    return most_s if options.verify_budget_s is None else min(most_s, options.verify_budget_s)


def _identity(command: Sequence[str]) -> dict[str, Any]:
    # A module run (-m) is hashed too: its file is found on the path without importing it.
    return identity(command, parse_launch(command).script)


def tune_script(
    command: Sequence[str],
    options: TuneOptions = TuneOptions(),
    *,
    on_trial: Callable[[dict[str, Any], int, TrialResult | None], None] | None = None,
    on_decision: Callable[[Decision], None] | None = None,
    on_verify: Callable[[str, int], None] | None = None,
    facts: Facts | None = None,
    spent_s: float = 0.0,
) -> TuneRun:
    """Diagnose (unless ``facts`` of a doctor run are given), search on top of the user's
    own ``options.config_path`` (when there is one), write the winner there. ``spent_s``:
    seconds already spent on this tune before the call (the doctor run of ``facts``),
    counted in ``options.budget_s``."""
    base = user_config(options.config_path)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    if not options.resume:
        options.writes_ledger.unlink(missing_ok=True)  # an earlier tune's; --resume adds to it
    start = time.monotonic() - max(spent_s, 0.0)
    deadline = start + options.budget_s * (1 + BUDGET_SLACK)
    if facts is None:
        facts, failed = _doctor_facts(command, options)
        if failed is not None:
            return _failed_run(facts, failed, base)
    findings = diagnose(facts) if facts is not None and facts.steps else []
    context = context_from_facts(facts) if facts is not None else TuneContext()
    if options.memory_limit_bytes is not None:  # --memory-limit replaces the device's default
        context = dataclasses.replace(context, memory_limit_bytes=options.memory_limit_bytes)
    levers = order_levers(default_levers(), {f.id: f.rank_speedup for f in findings}, context.measured)
    run_steps, run_steps_source = _planned_run(options, facts)
    options = _trial_length(options, facts, run_steps)
    ident = _identity(command)
    journal = Journal(options.out_dir / "journal.jsonl", resume=options.resume, ident=ident)
    # The diagnosis spent part of the budget: the search has the rest, and keeps the
    # end-to-end check's time before the deadline.
    spent = time.monotonic() - start
    search_options = SearchOptions(budget_s=max(options.budget_s - spent, 0.0), deadline_s=deadline - start - spent,
                                   min_gain=options.min_gain, max_repeats=options.max_repeats, run_steps=run_steps,
                                   trial_steps=options.steps_per_trial or MIN_TRIAL_STEPS)
    # What a lever with a long fixed cost (max-autotune's compile) needs to know it can pay.
    context = dataclasses.replace(context, planned_steps=run_steps, budget_s=search_options.budget_s)
    coverage, measure = CoverageNotes(), _journaled_measure(journal, command, options, base, on_trial, deadline)
    outcome = run_search(levers, context, lambda *a, **k: _noted(coverage, measure(*a, **k)), search_options,
                         on_decision=on_decision, reserve=_check_reserve(options))
    coverage.annotate(outcome.decisions)  # what a change applied at the root covered
    if journal.restarted:
        outcome.warnings.append(f"--resume started afresh: {journal.restarted}")
    settings, e2e, verdict = _verify(command, options, base, outcome, run_steps, on_verify, ident,
                                     time_left_s=deadline - time.monotonic())
    run = TuneRun(facts=facts, findings=findings, outcome=outcome, config=settings_to_config(settings, base),
                  run_steps=run_steps, run_steps_source=run_steps_source, reused_trials=journal.reused,
                  steps_per_trial=options.steps_per_trial,
                  base=base, end_to_end=e2e, verdict=verdict, writes=summed_writes(options.writes_ledger),
                  **_peak(facts))
    if outcome.error is None:
        write_config(options.config_path, run.config, toml_header(run, command))
    _write_outcome(options.out_dir / "outcome.json", command, outcome, run_steps, options, journal.reused)
    return run
