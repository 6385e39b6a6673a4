"""The end of a tune: the end-to-end check of the search's pick, and where it is written.

The tune's budget keeps the check's time, priced by :func:`check_reserve`; the check runs in
what the budget grants it (:func:`verify_outcome`); its verdict decides where the configuration goes
(:func:`write_result`): ``torchboost.toml`` when verified (or when the check was turned
off), ``torchboost.unverified.toml`` when the check could not finish for lack of time, or
when the machine's load moved between the baseline and the pairs by more than their
interval allows (:mod:`torchboost.tune.unverified`), nowhere when it refuted it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from torchboost.config import BoostConfig, Overlay
from torchboost.tune.budget import BUDGET_SLACK, TuneBudget
from torchboost.tune.config_file import TunedFor, write_config
from torchboost.tune.run_data import TuneOptions, TuneRun
from torchboost.tune.search.decision import TuneOutcome
from torchboost.tune.trials.journal import RunJournal
from torchboost.tune.trials.trial_length import MIN_TRIAL_STEPS
from torchboost.tune.trials.trial_result import TrialResult, describe_settings
from torchboost.tune.unverified import as_typed, check_unfinished, write_unverified
from torchboost.tune.verify import plan_verification, reserve_s, shortest_pair_s, shortest_run_s, verify
from torchboost.tune.verify.check_plan import PLAN_FILL
from torchboost.tune.verify.end_to_end import CLAIM_PAIRS, EndToEnd, end_to_end_verdict, nothing_kept

__all__ = ["check_most_s", "check_reserve", "toml_header", "tune_again", "unfinished",
           "verify_outcome", "write_result"]


def toml_header(run: TuneRun, command: Sequence[str], *, apart: bool = False) -> str:
    """Comment lines for torchboost.toml: what it was tuned for (the command, the script's
    hash: :class:`~torchboost.tune.config_file.TunedFor`), the verified figure, each kept change.
    ``apart``: for torchboost.unverified.toml, beside the user's file rather than in its place."""
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
        lines.append("Every other setting is your torchboost.toml's." if apart else
                     "Every other setting is the one this file had before (kept as torchboost.toml.bak).")
    return "\n".join(lines)


def _whole_run_estimate(outcome: TuneOutcome, run_steps: int | None) -> float | None:
    """The baseline's whole run in seconds, from its trial (None: its length is unknown)."""
    if run_steps is None:
        return None
    return outcome.baseline.fixed_s + run_steps * outcome.baseline.ms_per_step / 1e3


def verify_outcome(command: Sequence[str], options: TuneOptions, base: BoostConfig, outcome: TuneOutcome,
            run_steps: int | None, on_verify: Callable[[str, int], None] | None,
            ident: dict[str, Any], budget: TuneBudget | None = None) -> tuple[Overlay, EndToEnd | None, str]:
    """The settings to write, the end-to-end figures, and the verdict in words; the check
    runs within ``budget`` (its own, :meth:`TuneBudget.for_check`; None: the most a check of
    ``options`` may take), and is skipped, said so, when not even one pair of the baseline's
    runs fits."""
    if outcome.error is not None or not outcome.settings or options.verify_pairs < 1:
        return outcome.settings, None, "" if outcome.settings else nothing_kept(outcome)
    if budget is None:
        budget = TuneBudget(options.budget_s, check_most_s=options.verify_budget_s).for_check()
    baseline = outcome.baseline  # the shortest pair: whole runs, or stopped after the warm-up's need
    pair_s = shortest_pair_s(baseline.wall_s, baseline.fixed_s, baseline.ms_per_step,
                             trial_steps=options.steps_per_trial or MIN_TRIAL_STEPS, warmup=options.warmup,
                             tuned_ms=outcome.waterfall[-1].ms_per_step, shortened=True)
    if not budget.affords(pair_s):  # priced as the search's reserve was
        return outcome.settings, None, (f"not verified end to end: --budget left {budget.left_s():.0f} s, not "
                                        "enough for one pair of runs")
    plan = plan_verification(pairs=options.verify_pairs, budget_s=budget.left_s(),
                             step_ms=outcome.waterfall[-1].ms_per_step, fixed_s=outcome.baseline.fixed_s,
                             trial_steps=options.steps_per_trial or MIN_TRIAL_STEPS, warmup=options.warmup,
                             whole_run_s=_whole_run_estimate(outcome, run_steps), planned_steps=run_steps,
                             baseline_ms=baseline.ms_per_step)
    journal = RunJournal(options.out_dir / "verify.jsonl", resume=options.resume, ident=ident)
    e2e = verify(command, base, outcome.settings, plan, out_dir=options.out_dir / "verify", on_run=on_verify,
                 journal=journal, min_gain=options.min_gain, writes_ledger=options.writes_ledger,
                 search_load_pct=baseline.load_pct, budget=budget)
    settings, verdict = end_to_end_verdict(outcome.settings, outcome.decisions, e2e, options.min_gain)
    return settings, e2e, verdict


def check_reserve(options: TuneOptions, budget: TuneBudget) -> Callable[[TrialResult, float | None], float] | None:
    """The seconds the budget keeps for the end-to-end check, from the baseline's trial and
    the pace of the configuration kept so far (None: the baseline's), at most the check's
    share of the whole tune's time (``budget.check_most_s``); None when there is no check."""
    if options.verify_pairs < 1:
        return None
    most_s = budget.check_most_s
    return lambda baseline, tuned_ms=None: reserve_s(
        baseline.wall_s, baseline.fixed_s, baseline.ms_per_step, trial_steps=options.steps_per_trial or MIN_TRIAL_STEPS,
        warmup=options.warmup, most_s=most_s, tuned_ms=tuned_ms)


def check_most_s(options: TuneOptions) -> float:
    """The most the end-to-end check of a tune of ``options`` may take (the budget's
    :attr:`~TuneBudget.check_most_s`): half the whole tune's time, or ``verify_budget_s``."""
    return TuneBudget(options.budget_s, check_most_s=options.verify_budget_s).check_most_s


def unfinished(outcome: TuneOutcome, e2e: EndToEnd | None, options: TuneOptions) -> bool:
    """The search kept a change the end-to-end check could not confirm, for lack of time or
    under a load that moved (:func:`check_unfinished`): it goes to ``torchboost.unverified.toml``. Not when the check
    was turned off (--verify-pairs 0), nor for a memory lever kept to fit the limit."""
    if outcome.error is not None or not outcome.settings or options.verify_pairs < 1:
        return False
    if any(d.status == "kept" and d.memory_lever for d in outcome.decisions):
        return False
    return check_unfinished(e2e, options.min_gain, options.verify_pairs)


def write_result(command: Sequence[str], options: TuneOptions, run: TuneRun) -> None:
    """Write the tune's configuration where its verdict sends it: ``torchboost.toml``, or,
    when the check could not finish (:func:`unfinished`), ``torchboost.unverified.toml``
    with the command that verifies it (the user's file, and ``run.config``, as they were);
    nothing when the search failed, nor when nothing changes (no proven win: the user's
    file, or its absence, as it was)."""
    if run.outcome.error is not None:
        return
    if not unfinished(run.outcome, run.end_to_end, options):
        if run.settings:
            write_config(options.config_path, run.config, toml_header(run, command))
            run.written = True
        return
    # `tune --resume` would replay the check's journaled runs, and their load: only a
    # comparison run afresh can tell a moved load's claim.
    moved = run.end_to_end is not None and run.end_to_end.load_moved(options.min_gain)
    run.unverified = write_unverified(command, options.config_path, run.config,
                                      toml_header(run, command, apart=True), run.outcome, run.run_steps,
                                      None if moved else tune_again(command, options, run.outcome))
    run.verdict = f"{run.verdict}; {run.unverified.words()}"
    run.config = run.base if run.base is not None else BoostConfig.off()


def tune_again(command: Sequence[str], options: TuneOptions, outcome: TuneOutcome) -> tuple[tuple[str, ...], float]:
    """The ``torchboost tune --resume --budget B`` command that finishes a check the budget
    cut short, and the most seconds it takes (B and its slack). With ``--resume`` the
    diagnosis and every finished trial come from the out folder at no cost, and the check's
    time (:func:`check_most_s`, half of B and its slack) holds the pairs a claim rests on,
    each run the shortest the check plans (at the baseline's and the kept configuration's
    paces), filled to :data:`PLAN_FILL`; what B leaves beyond that the search spends on the
    levers it had not reached. The options given differently from their defaults are given
    again, so the journal read is this tune's."""
    baseline, steps = outcome.baseline, options.steps_per_trial or MIN_TRIAL_STEPS
    runs = ((baseline.wall_s, baseline.ms_per_step), (0.0, outcome.waterfall[-1].ms_per_step))
    pair_s = sum(max(shortest_run_s(wall, baseline.fixed_s, ms, trial_steps=steps, warmup=options.warmup), 1.0)
                 for wall, ms in runs)
    need_s = CLAIM_PAIRS * pair_s / PLAN_FILL
    budget = max(math.ceil(options.budget_s / 60), math.ceil(2 * need_s / (1 + BUDGET_SLACK) / 60)) * 60
    words = ["torchboost", "tune", "--resume", "--budget", str(budget)]
    default = TuneOptions()
    for flag, value, usual in (("--out", options.out_dir, default.out_dir),
                               ("--config", options.config_path, default.config_path),
                               ("--run-steps", options.run_steps, None),
                               ("--steps-per-trial", options.steps_per_trial, None),
                               ("--warmup", options.warmup, default.warmup),
                               ("--verify-pairs", options.verify_pairs, default.verify_pairs),
                               ("--stall-timeout", options.stall_timeout_s, default.stall_timeout_s),
                               ("--memory-limit", options.memory_limit_bytes, None)):
        if value is not None and value != usual:
            words += [flag, str(value)]
    return tuple([*words, "--", *as_typed(command)]), budget * (1 + BUDGET_SLACK)
