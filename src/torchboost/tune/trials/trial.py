"""One trial: the user's script in its own child process, with one candidate's settings applied.

The trial reuses the doctor's observed child (same injection, same step detection) with
the profiler off, and turns what it recorded into a :class:`TrialResult`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from torchboost.config import Overlay
from torchboost.plan import Bursts, Plan
from torchboost.env import LoadMeter
from torchboost.evidence.steps import warmup_only_words
from torchboost.process.no_stdin import stdin_words
from torchboost.observe.parent.request import RunRequest
from torchboost.observe.parent.supervise import run_observed
from torchboost.techniques.compile.compile_facts import CompileFacts
from torchboost.tune.trials.trial_result import TrialResult

__all__ = ["TrialRequest", "run_trial", "result_from_facts"]


def failure_words(facts: Any, exit_code: int, tail: str, prefix: str) -> str:
    """The failure in words: a stall and what the script was doing, a kill and its signal,
    or the exit code and the error's last line, after the training steps the script ran
    when it ran any (``prefix`` heads a failure of a script that ran none)."""
    stall = getattr(facts, "stall", None)
    if facts is not None and not facts.steps and facts.steps_seen and facts.ended == "finished" and not exit_code:
        return warmup_only_words(facts.steps_seen, facts.warmup_steps)
    if facts is not None and facts.ended == "stalled" and stall and stall.get("own"):
        return (f"{stall['doing']} after step {stall['at_step']} took {stall['after_s']:.0f} s, past its "
                f"{stall['limit_s']:.0f} s bound: torchboost ended the run (not a stall of the script's)")
    if facts is not None and facts.ended == "stalled" and stall:
        return f"stalled: no training step for {stall['after_s']:.0f} s, the script {stall['doing']}"
    signal_name = getattr(facts, "signal", None)
    if facts is not None and facts.ended == "killed" and signal_name:
        return f"killed by {signal_name}" + (" (out of memory?)" if signal_name == "SIGKILL" else "")
    last = tail.strip().splitlines()[-1] if tail.strip() else ""
    seen = facts.steps_seen if facts is not None else 0
    if seen:  # a script that trained, then ended: "no training step completed" would deny its steps
        head = f"the script ran {seen} training step{'s' if seen != 1 else ''}, then exited with code {exit_code}"
    else:
        head = f"{prefix} (exit code {exit_code})" if prefix else f"the script exited with code {exit_code}"
    stdin = stdin_words(tail)
    return head + (f": {stdin}" if stdin else f": {last}" if last else "")


def last_traceback(tail: str) -> str:
    """The script's last traceback in its stderr, for the user to read; '' when none."""
    at = tail.rfind("Traceback (most recent call last)")
    return tail[at:].strip() if at >= 0 else ""


def result_from_facts(facts: Any, settings: dict[str, Any], repeat: int, *, exit_code: int,
                      error_tail: str = "", wall_s: float = 0.0, bursts: Bursts | None = None) -> TrialResult:
    """Build a TrialResult from an observed run's Facts (None when the child wrote nothing);
    ``bursts``: the plan of a burst trial."""
    change = dict(bursts.change) if bursts is not None else {}
    if facts is None or not facts.steps:
        why = failure_words(facts, exit_code, error_tail, "no training step completed")
        return TrialResult(settings=settings, repeat=repeat, ok=False, error=why, wall_s=wall_s,
                           traceback=last_traceback(error_tail), bursts=change)
    step_ms = [s.total_ms for s in facts.steps]
    warmup_ms = list(getattr(facts, "warmup_step_ms", []) or [])
    median_ms = statistics.median(step_ms)
    compile_s = max(0.0, (sum(warmup_ms) - len(warmup_ms) * median_ms) / 1e3) if warmup_ms else 0.0
    compiled = facts.seen(CompileFacts)
    if compiled.frames:  # torch.compile's own count: the compile, not the first steps' other costs
        compile_s = compiled.compile_s
    losses = list(getattr(facts, "warmup_losses", []) or []) + list(facts.losses)
    batch = facts.loader.batch_size if facts.loader is not None else None
    steps_run = len(warmup_ms) + len(step_ms)
    fixed_s = max(0.0, wall_s - steps_run * statistics.fmean(step_ms) / 1e3) if wall_s else 0.0
    result = TrialResult(
        settings=settings, repeat=repeat, step_ms=step_ms, losses=losses, samples_per_step=batch,
        peak_memory_bytes=int(facts.peak_memory_bytes or facts.peak_rss_bytes or 0),
        compile_s=compile_s, compile_cache=compiled.cache, wall_s=wall_s, fixed_s=fixed_s,
        applied=list(getattr(facts, "applied", []) or []), bursts=change,
    )
    _burst_figures(result, facts)
    result.stopped_early = bool(getattr(facts, "stopped_slow", False))
    result.stopped_decided = getattr(facts, "stopped_decided", None)
    if facts.ended in ("crashed", "stalled", "killed") or exit_code != 0:
        result.ok = False
        result.error = failure_words(facts, exit_code, error_tail, "")
        result.traceback = last_traceback(error_tail)
    # Non-finite losses leave ok=True: the run itself worked, and loss parity then rejects
    # the candidate as incorrect, saying at which step the loss went bad.
    return result


def _burst_figures(result: TrialResult, facts: Any) -> None:
    """A burst trial's plain and switched steps from the facts' one quick probe (or why none)."""
    if not result.bursts:
        return
    probe = next(iter(getattr(facts, "quick_probes", []) or []), None)
    if probe is None:
        result.burst_error = "the script ended before its bursts"
        return
    result.burst_plain_ms, result.burst_switched_ms = list(probe.plain_ms), list(probe.switched_ms)
    result.burst_error = probe.error or (None if probe.switched_ms else "the script ended before its bursts")


@dataclass(frozen=True, kw_only=True)
class TrialRequest:
    """One trial asked for: ``command`` run once under ``plan``; seconds and steps as named."""

    command: Sequence[str]
    settings: Overlay
    """The candidate's settings, as the search names them (``repeat`` counts the runs of
    the same ones): the trial's label in its result and the journal."""
    repeat: int
    plan: Plan
    """What the trial's process applies: ``settings`` on the user's configuration, resolved
    once by whoever asks (:meth:`Plan.tuned`), handed to the child whole; a burst trial's
    switches are in it (:attr:`Plan.bursts`: the candidate change alternated on top of
    ``settings`` after the measured steps, :mod:`torchboost.tune.search.bursts`)."""
    steps: int
    """Measured steps after ``warmup`` unmeasured ones."""
    warmup: int
    out_dir: Path
    timeout_s: float | None = None
    """The trial is ended after this long, and fails as timed out."""
    slower_than_ms: float | None = None
    """It stops early once its first steps are slower than this each."""
    stall_timeout_s: float | None = 60.0
    writes_ledger: Path | None = None
    """Where the trials sum what the script wrote in the user's folders."""
    decide: tuple[float, float] | None = None
    """(the incumbent's ms/step, the margin): it stops once its steps decide its ratio."""

    def run_request(self) -> RunRequest:
        """The observed run this trial is: its plan applied, no profiler, quiet."""
        return RunRequest(
            command=self.command, steps=self.steps, warmup=self.warmup, out_dir=self.out_dir, apply=self.plan,
            profile=False, echo=False, timeout_s=self.timeout_s, stop_slower_than_ms=self.slower_than_ms,
            stall_timeout_s=self.stall_timeout_s, writes_ledger=self.writes_ledger, stop_decided=self.decide)


def run_trial(request: TrialRequest) -> TrialResult:
    """Run the trial ``request`` asks for: its warm-up, then its steps measured, or fewer
    when it stops early (slower, or decided); with bursts, a burst trial."""
    settings, repeat, bursts = request.settings, request.repeat, request.plan.bursts
    with LoadMeter() as load:
        start = time.monotonic()
        observed = run_observed(request.run_request())
        wall = time.monotonic() - start
    if observed.timed_out:
        return TrialResult(settings=settings, repeat=repeat, ok=False,
                           error=f"timed out after {request.timeout_s:.0f} s",
                           wall_s=wall, load_pct=load.pct, bursts=dict(bursts.change) if bursts else {})
    result = result_from_facts(observed.facts, settings, repeat, exit_code=observed.exit_code,
                               error_tail=observed.stderr_tail, wall_s=wall, bursts=bursts)
    result.load_pct = load.pct
    return result
