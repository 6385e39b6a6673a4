"""The last word of a tuning run: the tuned configuration against the baseline, end to end.

The search judges time per step in short trials. What the user gets is the wall time of the
whole run, start-up, workers and compile included, run the way they will run it. So after
the search both configurations run in turn (A B A B ...), each as a fresh process through
``torchboost run`` (which a Booster in the script also reads, through the trial hand-over),
timed from start to exit. The baseline with no configuration of the user's is their own
command (``python train.py ARGS``: no torchboost setting in the process); both sides run
under the write guard. Pairs alternate their order (A B, B A, ...), so a drifting machine or
a cache warmed by the first run favours neither. When the whole script fits the
verification's time it runs to its own end; otherwise each run stops after the same number
of steps, and the report says so. A capped run holds a fixed cost (start-up, workers, a
compile) that the user's longer run pays once: when the planned run is known and longer,
each capped run is projected to it, from its own measurements only: its wall time, plus the
steps it did not run at its own pace (the mean of its second half of steps), and the report
says "projected". The speedup comes with its interval: the pairs' own spread, each side at
least the runs' noise (how much each configuration's runs differ from one another) from the
median; the tuned configuration is kept only when the interval's lower end is faster by the
least gain; while the median clears that gate and the lower end does not, more pairs are run
as the budget allows. Otherwise the user's own configuration stays. Each run's share of the
machine taken by other processes is read as the search's trials read it (:class:`LoadMeter`),
so the verdict can tell a claim the load's move could have made (:meth:`EndToEnd.load_moved`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from torchboost.config import BoostConfig, Overlay
from torchboost.env import LoadMeter
from torchboost.handover import TRIAL_SETTINGS_ENV, write_plan
from torchboost.plan import Plan
from torchboost.process.launch import parse_launch
from torchboost.observe.parent.request import RunRequest
from torchboost.observe.parent.supervise import run_observed
from torchboost.process.guarded import run_guarded
from torchboost.tune.budget import TuneBudget
from torchboost.tune.verify.check_plan import VerifyPlan
from torchboost.tune.verify.end_to_end import EndToEnd, rank_rises_at
from torchboost.tune.trials.journal import RunJournal

__all__ = ["EndToEnd", "runs_budget", "users_own_command", "verify"]


def users_own_command(command: Sequence[str]) -> list[str]:
    """``command`` as the user runs it, with this interpreter for its ``python`` word."""
    words = list(command)
    if words and Path(words[0]).name.startswith("python"):
        words[0] = sys.executable
    return words


def _whole_run(command: Sequence[str], config_file: Path | None, limit_s: float, out_dir: Path,
               writes_ledger: Path | None = None) -> float | None:
    """Seconds the whole script took under ``torchboost run`` with ``config_file`` (None:
    the user's own command, no torchboost settings in the process); None when it ran past
    ``limit_s``. Raises RuntimeError when it failed. Both sides run under the write guard
    (:func:`~torchboost.process.guarded.run_guarded`)."""
    if config_file is None:
        argv, env = users_own_command(command), dict(os.environ)
    else:
        argv = [sys.executable, "-m", "torchboost.cli", "run", "--config", str(config_file), "--", *command]
        env = {**os.environ, TRIAL_SETTINGS_ENV: str(config_file.with_suffix(".json"))}
    if limit_s < 1.0:  # the check's budget has no second left for it: not started
        return None
    start = time.monotonic()
    # Observe's process group, as the doctor's and the trials' children: a Ctrl-C kills it
    # whole and names what lived on outside it.
    code, _ = run_guarded(argv, env=env, timeout_s=limit_s, out_dir=out_dir, script=parse_launch(command).script,
                          writes_ledger=writes_ledger)
    if code is None:
        return None
    if code != 0:
        how = "as you run it" if config_file is None else "under torchboost run"
        raise RuntimeError(f"the script exited with code {code} {how}")
    return time.monotonic() - start


def _capped_run(command: Sequence[str], applied: Plan, steps: int, out_dir: Path,
                limit_s: float | None = None,
                writes_ledger: Path | None = None) -> tuple[float, float, int | None] | None:
    """Seconds of a run stopped after ``steps``, its pace (the mean step, ms, of its second
    half) and the steps it ran when the script ended on its own before them (else None);
    None when it ran past ``limit_s`` (it is then ended), or when that is under a second
    (not started)."""
    if limit_s is not None and limit_s < 1.0:
        return None
    start = time.monotonic()
    observed = run_observed(RunRequest(command=command, steps=steps, warmup=0, out_dir=out_dir, apply=applied,
                                       profile=False, echo=False, timeout_s=limit_s, writes_ledger=writes_ledger))
    if observed.timed_out:
        return None
    if observed.exit_code != 0 or observed.facts is None or not observed.facts.steps:
        raise RuntimeError(f"the script exited with code {observed.exit_code} after {observed.steps_seen} steps")
    seconds = time.monotonic() - start
    later = observed.facts.steps[len(observed.facts.steps) // 2:]
    ended_own = observed.facts.steps_seen if observed.facts.ended == "finished" else None
    return seconds, statistics.fmean(s.total_ms for s in later), ended_own


CAPPED_RUN_SLACK = 2.0
"""A capped run may take this many times its share of the check's time (a pair's share
over two) before it is ended; never longer than the check's budget grants."""


def _run_limit(plan: VerifyPlan, budget: TuneBudget | None, slack: float = 1.0) -> float:
    """How long the next run may take: ``slack`` x its share (a whole run: its share; a capped
    one: :data:`CAPPED_RUN_SLACK` x), at most what the check's budget grants."""
    limit = slack * plan.run_limit_s
    return limit if budget is None else budget.grant(limit)


def _config_files(tmp: Path, plans: dict[str, Plan]) -> dict[str, Path]:
    files = {name: tmp / f"{name}.toml" for name in plans}
    for name, plan in plans.items():
        plan.config.to_toml(files[name])
        write_plan(files[name].with_suffix(".json"), plan)
    return files


def _replay(journal: RunJournal, key: str, paces: list[float], loads: list[float]) -> None:
    """A journaled run's pace (capped) and the load it ran under, where recorded."""
    pace, load = journal.pace(key), journal.load(key)
    if pace is not None:
        paces.append(pace)
    if load is not None:
        loads.append(load)


def _capped_instead(result: EndToEnd, plan: VerifyPlan) -> None:
    """A whole run took too long: every run stops after the same steps instead, in what the
    check's budget has left after the whole runs; the whole runs' figures are dropped."""
    result.steps = plan.fallback_steps
    for runs in (result.baseline_runs_s, result.tuned_runs_s, result.baseline_pace_ms, result.tuned_pace_ms,
                 result.ran, result.baseline_loads_pct, result.tuned_loads_pct):
        runs.clear()


def verify(command: Sequence[str], base: BoostConfig, settings: Overlay, plan: VerifyPlan, *, out_dir: Path,
           on_run: Callable[[str, int], None] | None = None, journal: RunJournal | None = None,
           min_gain: float = 0.03, writes_ledger: Path | None = None, search_load_pct: float | None = None,
           load_meter: Callable[[], LoadMeter] = LoadMeter, budget: TuneBudget | None = None) -> EndToEnd:
    """Run the baseline (``base``) and the tuned configuration (``settings`` on ``base``) in
    turn, ``plan.pairs`` times each, end to end (the module docstring); runs in ``journal`` are
    replayed, with their load. ``search_load_pct``: other processes' load in the baseline's trial
    (percent), each run's read by a ``load_meter``; ``budget`` (None: :func:`runs_budget`) grants runs."""
    result = EndToEnd(steps=plan.steps, planned_steps=plan.planned_steps, search_load_pct=search_load_pct)
    budget = budget or (runs_budget(plan.budget_s, result) if plan.budget_s else None)
    plans = {"baseline": Plan.of(base), "tuned": Plan.tuned(settings, base)}  # each resolved once, as trials are
    with tempfile.TemporaryDirectory(prefix="torchboost-verify-") as tmp:
        files: dict[str, Path | None] = {**_config_files(Path(tmp), plans)}
        if base == BoostConfig.off():
            files["baseline"] = None  # no configuration of the user's: their own command, as is

        def run_timed(name: str) -> tuple[float | None, float | None]:  # seconds (None: past its limit), pace
            limit = _run_limit(plan, budget, 1.0 if result.steps is None else CAPPED_RUN_SLACK)
            if result.steps is None:
                return _whole_run(command, files[name], limit, out_dir / "whole", writes_ledger), None
            seconds, pace, ran = _capped_run(command, plans[name], result.steps, out_dir, limit, writes_ledger) or (
                None, None, None)
            result.ran.append(ran)
            return seconds, pace

        def run_one(name: str, pair: int) -> float | None:
            key = json.dumps([name, pair, result.steps, settings.to_dict(), list(command)], sort_keys=True)
            paces = result.baseline_pace_ms if name == "baseline" else result.tuned_pace_ms
            loads = result.baseline_loads_pct if name == "baseline" else result.tuned_loads_pct
            recorded = journal.get(key) if journal is not None else None
            if recorded is not None:
                _replay(journal, key, paces, loads)  # type: ignore[arg-type]
                result.ran.append(None)  # not journaled: taken as capped
                return recorded
            meter = load_meter()
            try:
                with meter:
                    seconds, pace = run_timed(name)
            except RuntimeError as exc:
                raise RuntimeError(f"the {name} configuration failed end to end: {exc}") from None
            if pace is not None:
                paces.append(pace)
            load = meter.pct if seconds is not None and meter.measured else None
            if load is not None:
                loads.append(load)
            if seconds is not None and journal is not None:
                journal.put(key, seconds, pace, load)
            return seconds

        try:
            _measure_pairs(result, plan.pairs, run_one, on_run, budget=budget)
            if result.steps is None and result.pairs < plan.pairs and not result.out_of_time:
                _capped_instead(result, plan)
                _measure_pairs(result, plan.pairs, run_one, on_run, budget=budget)
            if result.steps is not None and result.pairs < plan.pairs:
                result.out_of_time = True  # a capped run ran past what the check had left
            _more_pairs(result, plan, run_one, on_run, min_gain, budget)
        except RuntimeError as exc:
            result.error = str(exc)
    return result


def runs_budget(budget_s: float, result: EndToEnd) -> TuneBudget:
    """A budget of ``budget_s`` whose clock is the seconds of ``result``'s runs so far: a check
    given no budget of its own (``torchboost compare``'s, where each run may take it all)."""
    return TuneBudget(budget_s, whole_s=budget_s, clock=lambda: result.spent_s, spent_s=result.spent_s)


def _more_pairs(result: EndToEnd, plan: VerifyPlan, run_one: Callable[[str, int], float | None],
                on_run: Callable[[str, int], None] | None, min_gain: float, budget: TuneBudget | None = None) -> None:
    """While the verdict is open, or the claim kept imprecise, and ``budget`` (None: one of
    ``plan.budget_s`` in the runs' seconds, :func:`runs_budget`) affords another pair (at the
    pace so far), one more, up to ``plan.max_pairs``; none without either. A verdict or a
    claim no pair at this rank can settle (:meth:`EndToEnd.held_by_rank`: an open one resting
    on a pair that is not faster) gets pairs only where the budget affords all of them up to
    the count where the rank rises (:func:`rank_rises_at`): fewer would only spend the time."""
    if budget is None and plan.budget_s:
        budget = runs_budget(plan.budget_s, result)
    short = result.out_of_time  # an extra pair that does not fit leaves the planned ones complete

    def open_or_imprecise() -> bool:
        return result.undecided(min_gain) or (result.faster(min_gain) and result.imprecise())

    def block_fits() -> bool:  # the pairs up to the next rank, at the pace of the pairs so far
        if not result.held_by_rank(min_gain):
            return True
        more = rank_rises_at(result.pairs)
        return more <= plan.max_pairs and budget.affords((more - result.pairs) * result.spent_s / result.pairs)
    while (budget is not None and result.pairs and open_or_imprecise() and result.pairs < plan.max_pairs
           and block_fits()):
        before = result.pairs
        _measure_pairs(result, result.pairs + 1, run_one, on_run, start=result.pairs, budget=budget)
        if result.pairs == before:  # it did not fit, or a run was too long
            break
    result.out_of_time = short


def _measure_pairs(result: EndToEnd, pairs: int, run_one: Callable[[str, int], float | None],
                   on_run: Callable[[str, int], None] | None, *, start: int = 0,
                   budget: TuneBudget | None = None) -> None:
    """A B, B A, A B ... (each pair's order alternates); stops at the first run that returns
    None (a whole run too long), and, with ``budget``, before a pair it does not afford at
    the pace of the pairs so far (``result.out_of_time``). A pair cut after its
    first run leaves no run behind: a side's runs are its pairs' (a tuned run left so was
    counted, and, replayed when the pair was tried again, counted twice)."""
    for pair in range(start, pairs):
        if budget is not None and result.pairs and not budget.affords(result.spent_s / result.pairs):
            result.out_of_time = True
            return
        order = (("baseline", result.baseline_runs_s), ("tuned", result.tuned_runs_s))
        done: list[list[float]] = []
        for name, runs in (order if pair % 2 == 0 else order[::-1]):
            if on_run is not None:
                on_run(name, pair)
            seconds = run_one(name, pair)
            if seconds is None:
                for runs_so_far in done:
                    runs_so_far.pop()
                return
            runs.append(seconds)
            done.append(runs)
