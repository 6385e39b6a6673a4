"""A tuning run as plain data, for its report (:mod:`torchboost.report.tune_report`).

``tune_summary(run)`` holds everything ``report.json`` states about the run, as plain
dicts, lists, strings and numbers, so the report renders it without knowing the tuner:

- the keys of ``report.json`` (its schema is documented in :mod:`torchboost.report.tune_report`)
  from ``command`` to ``config``, in that order, except the report's own ``precision``;
  ``schema_version``, ``kind``, ``torchboost_version`` and ``notes`` are the report's too;
- each decision with the keys of a ``report.json`` decision up to ``peak_memory_bytes``
  (not the phrases ``break_even`` and ``verdict``), plus the words and facts the report
  phrases them from: ``subject`` (what a reader calls the candidate: "bf16", or the
  technique's title), ``reduced_precision`` (the lever lowers numeric precision),
  ``amortised`` (the lever is compile: its compile time must be repaid) and
  ``memory_lever`` (the lever trades time for memory);
- ``verdict``: what the end-to-end check decided, in words (the headline's source);
- ``next_step``: ``{"how": "run" | "booster" | "transformers" | "lightning" | "accelerate",
  "text"}``, how this script takes the configuration up.

Numbers are as measured: a break-even that never comes is ``inf`` here (the report
writes non-finite numbers as null).
"""

from __future__ import annotations

import os
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from torchboost.config import BoostConfig
from torchboost.config_files import ConfigError, config_text, find_config
from torchboost.frameworks import spell, training_arguments
from torchboost.tune.ending import toml_header
from torchboost.tune.run_data import TuneRun
from torchboost.tune.search.memory_limit import limit_source
from torchboost.tune.search import Decision, Status, WaterfallStep
from torchboost.tune.trials.trial_result import describe_settings

__all__ = ["tune_summary"]


def _samples_per_s(samples_per_step: int | None, step_ms: float | None) -> float | None:
    if not samples_per_step or not step_ms:
        return None
    return 1e3 * samples_per_step / step_ms


def _decision(d: Decision) -> dict[str, Any]:
    technique = d.title or d.lever
    return {
        "lever": d.lever,
        "technique": technique,
        "settings": dict(d.settings),
        "change": describe_settings(d.settings),
        "status": Status(d.status).value,
        "reason": d.reason,
        "ratio": d.ratio,
        "ratios": list(d.ratios),
        "ms_per_step": d.ms_per_step,
        "break_even_steps": d.break_even_steps,
        "peak_memory_bytes": d.peak_memory_bytes,
        "subject": d.subject or technique,
        "reduced_precision": d.reduced_precision,
        "amortised": d.amortised,
        "memory_lever": d.memory_lever,
        "compile_cold_s": d.compile_cold_s,
        "compile_warm_s": d.compile_warm_s,
    }


def _mfu_pct(flops_per_s_at_1ms: float | None, ms_per_step: float | None) -> float | None:
    """MFU of a step of ``ms_per_step``, from FLOPs per step over the peak, per millisecond."""
    if not flops_per_s_at_1ms or not ms_per_step:
        return None
    return 100.0 * flops_per_s_at_1ms / ms_per_step


def _mfu(run: TuneRun, before_ms: float | None, after_ms: float | None) -> dict[str, Any] | None:
    """The diagnosed step's FLOPs against the probe's peak, before and after; None without either."""
    flops = run.facts.flops_per_step if run.facts is not None else None
    if not flops or not run.peak_flops_per_s:
        return None
    after_peak = run.after_peak_flops_per_s or run.peak_flops_per_s
    return {"flops_per_step": flops, "peak_flops_per_s": run.peak_flops_per_s, "dtype": run.peak_dtype,
            "after_peak_flops_per_s": after_peak, "after_dtype": run.after_peak_dtype or run.peak_dtype,
            "before_pct": _mfu_pct(1000.0 * flops / run.peak_flops_per_s, before_ms),
            "after_pct": _mfu_pct(1000.0 * flops / after_peak, after_ms)}


def _waterfall_entry(step: WaterfallStep, kept: Decision | None, samples_per_step: int | None) -> dict[str, Any]:
    ratios = list(kept.ratios) if kept is not None else []
    low = high = step.ms_per_step
    if ratios:
        # The bar is the candidate's median time; its error bar spans the pair ratios.
        mid = statistics.median(ratios)
        low = min(step.ms_per_step, step.ms_per_step * min(ratios) / mid)  # min/max: rounding
        high = max(step.ms_per_step, step.ms_per_step * max(ratios) / mid)
    return {
        "label": step.label,
        "change": describe_settings(kept.settings) if kept is not None else "your script as it is",
        "settings": dict(step.settings),
        "ms_per_step": step.ms_per_step,
        "samples_per_s": _samples_per_s(samples_per_step, step.ms_per_step),
        "speedup": step.speedup,
        "spread": step.spread,
        "ratios": ratios,
        "step_ms_range": [low, high],
        "peak_memory_bytes": step.peak_memory_bytes or None,
    }


def _memory(run: TuneRun) -> dict[str, Any]:
    """The memory limit, how it was decided, and the peak before and after (bytes; None: not measured)."""
    outcome = run.outcome
    limit = outcome.memory_limit_bytes
    env = (run.facts.env if run.facts is not None else None) or {}
    before = outcome.waterfall[0].peak_memory_bytes if outcome.waterfall else outcome.baseline.peak_memory_bytes
    after = outcome.waterfall[-1].peak_memory_bytes if outcome.waterfall else None
    return {"limit_bytes": limit, "limit_source": limit_source(limit, env),
            "before_peak_bytes": before or None, "after_peak_bytes": after or None}


def _config(run: TuneRun, config_path: Path | None) -> dict[str, Any]:
    """torchboost.toml: its path, its text, and what the tune did to it ("written"; "as it
    was": the user's own, nothing to change; "not written": no file, nothing to change)."""
    path = str(config_path) if config_path else None
    if run.outcome.error is not None:
        return {"path": path, "toml": None, "state": "not written"}
    exists = config_path is not None and Path(config_path).is_file()
    state = "written" if run.written else "as it was" if exists else "not written"
    if exists:
        text = config_text(config_path)  # what is there, word for word
    else:
        command = list(run.facts.command) if run.facts is not None else []
        text = run.config.to_toml_string(header=toml_header(run, command))
    return {"path": path, "toml": text, "state": state}


def _headline_speedup(run: TuneRun) -> float:
    """The figure the user gets: end to end when verified, else the search's per step."""
    if not run.settings:
        return 1.0
    verified = run.end_to_end.speedup if run.end_to_end is not None else None
    return verified if verified is not None else run.outcome.speedup


def _findings(findings: list[Any]) -> list[dict[str, Any]]:
    # Fixes that change what is trained (a larger batch) are not tune's business: it never
    # measures them, so they are not listed beside the speedups it did measure.
    ranked = sorted((f for f in findings if not getattr(f, "changes_training", False)
                     and getattr(f, "memory_ratio", None) is None),
                    key=lambda f: -float(f.expected_speedup))
    return [{"id": f.id, "title": f.title, "severity": getattr(f, "severity", ""),
             "expected_speedup": f.expected_speedup} for f in ranked]


def next_step(facts: Any, command: list[str], config: BoostConfig | None = None,
              config_path: Path | None = None) -> dict[str, str]:
    """How this script takes the configuration up: {"how", "text"}. A Lightning or
    Accelerate script through its framework's own settings, a Booster script by itself,
    any other through ``torchboost run`` (with ``--config`` where ``config_path``, the file
    written, is not the one ``run`` finds in this folder); a Hugging Face Trainer script
    through the ``TrainingArguments`` keywords of ``config`` as well as ``torchboost run``."""
    frameworks = list(getattr(facts, "frameworks", []) or [])
    words = ["python" if w == sys.executable else w for w in command[:1]] + list(command[1:])  # as typed
    run = f"torchboost run{_config_flag(config_path)} -- " + " ".join(shlex.quote(w) for w in words)
    spelled = spell(config) if config is not None and "transformers" in frameworks else None
    if spelled is not None and spelled.words.transformers:
        rest = "; the rest: torchboost export --to transformers" if spelled.transformers_code else ""
        return {"how": "transformers", "text": f"{training_arguments(spelled)} in your script{rest}; or {run}"}
    if "lightning" in frameworks:
        return {"how": "lightning", "text": "torchboost export --to lightning   (the Trainer arguments to use)"}
    if "accelerate" in frameworks:
        return {"how": "accelerate", "text": "torchboost export --to accelerate > accelerate.yaml   "
                                             "(then accelerate launch --config_file accelerate.yaml ...)"}
    if getattr(facts, "uses_booster", False):
        return {"how": "booster", "text": "torchboost.Booster() in your training loop reads it from the "
                                          "working directory"}
    return {"how": "run", "text": run}


def _config_flag(config_path: Path | None) -> str:
    """`` --config PATH`` where ``torchboost run`` in this folder would not find ``config_path``."""
    if config_path is None:
        return ""
    try:
        found = find_config(".")
    except ConfigError:
        found = None
    if found is not None and found.resolve() == Path(config_path).resolve():
        return ""
    path = Path(config_path).resolve()
    shown = os.path.relpath(path) if path.is_relative_to(Path.cwd()) else str(path)
    return f" --config {shlex.quote(shown)}"


def tune_summary(run: TuneRun, *, config_path: Path | None = None) -> dict[str, Any]:
    """The report's plain data for ``run`` (see the module docstring).

    ``config_path``: where torchboost.toml was written; its text is read from there
    when it exists, else rendered from ``run.config``.
    """
    outcome = run.outcome
    per_step = outcome.baseline.samples_per_step
    kept = [d for d in outcome.decisions if d.status is Status.KEPT]
    # Every bar after the baseline comes from one kept decision, in the same order.
    waterfall = [_waterfall_entry(step, decision, per_step)
                 for step, decision in zip(outcome.waterfall, [None, *kept])]
    before_ms = outcome.waterfall[0].ms_per_step if outcome.waterfall else None
    after_ms = outcome.waterfall[-1].ms_per_step if outcome.waterfall else None
    reused = min(run.reused_trials, outcome.trials_run)
    status = ("failed" if outcome.error is not None else "tuned" if run.settings else
              "unverified" if run.unverified is not None else "unchanged")
    e2e = run.end_to_end.to_dict() if run.end_to_end is not None else None
    return {
        "command": list(run.facts.command) if run.facts is not None else [],
        "next_step": next_step(run.facts, list(run.facts.command) if run.facts is not None else [], run.config,
                               config_path),
        "status": status,
        "error": outcome.error,
        "before": {"ms_per_step": before_ms, "samples_per_s": _samples_per_s(per_step, before_ms)},
        "after": {"ms_per_step": after_ms, "samples_per_s": _samples_per_s(per_step, after_ms)},
        "speedup": _headline_speedup(run),
        "search_speedup": outcome.speedup,
        "samples_per_step": per_step,
        "memory": _memory(run),
        "mfu": _mfu(run, before_ms, after_ms),
        "settings": dict(run.settings),
        "waterfall": waterfall,
        "decisions": [_decision(d) for d in outcome.decisions],
        "findings": _findings(run.findings),
        "trials": {"total": outcome.trials_run, "run": outcome.trials_run - reused, "reused": reused,
                   "steps": run.steps_per_trial},
        "run_steps": run.run_steps,
        "run_steps_source": run.run_steps_source,
        "stopped_by_budget": outcome.stopped_by_budget,
        "noise": {"floor": outcome.noise, "aa_ratios": list(outcome.aa_ratios)},
        "warnings": list(outcome.warnings),
        "end_to_end": e2e,
        "verdict": run.verdict,
        "elapsed_s": outcome.elapsed_s,
        "config": _config(run, config_path),
        "writes": run.writes,
        "unverified": run.unverified.to_dict() if run.unverified is not None else None,
        "spent_s": dict(run.spent_s),
        "budget_s": run.budget_s,
        "burst_trials": outcome.burst_trials,
    }
