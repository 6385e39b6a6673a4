"""The tuner's report: ``report.json`` (documented below), ``report.md`` and ``report.html``.

It tells the before/after of ``torchboost tune``: the waterfall from the user's script as
is through each technique kept, every candidate tried and why it was kept or rejected, and
the ``torchboost.toml`` written.

``report.json`` schema (``schema_version`` 1, ``kind`` "tune"). Times in milliseconds;
a *ratio* is candidate step time / incumbent step time (below 1 is faster), a *speedup*
is baseline step time / this step time (above 1 is faster)::

    schema_version     int     1; bumped when a key changes meaning or disappears
    kind               str     "tune"
    torchboost_version str
    command            [str]   the tuned command line (empty when unknown)
    status             str     "tuned" (a technique was kept) | "unchanged" (none was) |
                               "failed" (the baseline did not run; see error)
    error              str | null
    before             {ms_per_step: float | null, samples_per_s: float | null}
    after              {ms_per_step, samples_per_s}   the tuned configuration
    speedup            float   before / after time per step (mean of measured steps)
    samples_per_step   int | null   batch size, when the trials saw it
    settings           {dotted toml key: value}   what the tuned configuration changes
    waterfall          [ {label, change, settings, ms_per_step, samples_per_s, speedup,
                          spread, ratios: [float], step_ms_range: [low, high]} ]
                       the baseline, then one entry per kept technique, in the order kept;
                       settings are cumulative; spread is max - min of the A/B pair ratios
                       that confirmed the step (0 for the baseline); step_ms_range is
                       ms_per_step scaled by the smallest and largest of those ratios
                       over their median (the plot's error bar)
    decisions          [ {lever, technique, settings, change, status, reason, ratio,
                          ratios, ms_per_step, break_even_steps, break_even, verdict} ]
                       every candidate in the order decided; status "kept" | "rejected" |
                       "incorrect" (loss parity failed) | "failed" (crashed) | "skipped"
                       (not worth trying); break_even_steps / break_even: for compile,
                       the steps after which its compile time is repaid (a number, and
                       words: null / "never ..." when it is not faster); verdict: one line
                       in words ("bf16 was 1.8x slower here: rejected")
    precision          [str]   the verdict line of each reduced-precision candidate
    findings           [ {id, title, severity, expected_speedup} ]   the doctor's, ranked
    trials             {total, run, reused, steps}   measurements the search used; run in a
                       fresh process this time, or reused from the journal (--resume);
                       steps: measured steps per trial (null when not recorded)
    run_steps          int | null   planned length of the real run (compile amortisation)
    stopped_by_budget  bool    the time budget ended the search before every lever was tried
    elapsed_s          float   seconds the search took
    config             {path: str | null, toml: str | null}   torchboost.toml and its text
                       (null toml: not written because the baseline failed)
    notes              [str]   what a reader needs to trust the figures

Non-finite numbers are written as null, so any JSON parser reads the file.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console

from torchboost._io import atomic_write_bytes
from torchboost.report import _tune_text as words
from torchboost.report.doctor import _finite
from torchboost.tune.levers import default_levers
from torchboost.tune.runner import TuneRun, toml_header
from torchboost.tune.search import INTERACTION, INTERACTION_TITLE, Decision, WaterfallStep
from torchboost.tune.trial_result import describe_settings

__all__ = ["TUNE_SCHEMA_VERSION", "build_tune_report", "write_tune_report", "print_tune_report"]

TUNE_SCHEMA_VERSION = 1
"""Version of the tuner's report.json layout documented in this module."""

_STATUSES = ("kept", "rejected", "incorrect", "failed", "skipped")


def _samples_per_s(samples_per_step: int | None, step_ms: float | None) -> float | None:
    if not samples_per_step or not step_ms:
        return None
    return 1e3 * samples_per_step / step_ms


def _decision_entry(d: Decision, titles: dict[str, str], run_steps: int | None) -> dict[str, Any]:
    entry = {
        "lever": d.lever,
        "technique": titles.get(d.lever, d.lever),
        "settings": dict(d.settings),
        "change": describe_settings(d.settings),
        "status": d.status,
        "reason": d.reason,
        "ratio": d.ratio,
        "ratios": list(d.ratios),
        "ms_per_step": d.ms_per_step,
        "break_even_steps": d.break_even_steps,
    }
    entry["break_even"] = words.break_even(entry, run_steps)
    entry["verdict"] = words.verdict(entry)
    return entry


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
    }


def _notes(run: TuneRun, trials: dict[str, int]) -> list[str]:
    outcome = run.outcome
    notes = [
        "Each technique was tried on top of those kept before it, measured against them in "
        "alternating pairs (A B A B), and kept only when its median ratio beat the noise "
        "margin and its losses matched the baseline's (same seed, same data).",
        f"{trials['total']} trials: {trials['run']} run now, {trials['reused']} reused from the journal"
        + (f"; {trials['steps']} measured steps each, after the warm-up." if trials.get("steps") else "."),
    ]
    if run.run_steps:
        notes.append(f"Planned run: {words.steps(run.run_steps)}; torch.compile is kept only if its "
                     "compile time is repaid within them.")
    else:
        notes.append("The planned run length is unknown (pass --run-steps): torch.compile was judged "
                     "on its step time alone, not on whether its compile time is repaid.")
    if outcome.stopped_by_budget:
        notes.append(f"The time budget stopped the search after {outcome.elapsed_s:.0f} s: the result "
                     "is the best found so far; run again with a larger --budget (and --resume) to try the rest.")
    else:
        notes.append(f"The search finished within its time budget ({outcome.elapsed_s:.0f} s).")
    return notes


def _config(run: TuneRun, config_path: Path | None) -> dict[str, Any]:
    if run.outcome.error is not None:
        return {"path": str(config_path) if config_path else None, "toml": None}
    if config_path is not None and Path(config_path).is_file():
        text = Path(config_path).read_text(encoding="utf-8")  # what was written, word for word
    else:
        command = list(run.facts.command) if run.facts is not None else []
        text = run.config.to_toml_string(header=toml_header(run.outcome, command))
    return {"path": str(config_path) if config_path else None, "toml": text}


def _findings(findings: list[Any]) -> list[dict[str, Any]]:
    ranked = sorted(findings, key=lambda f: -float(f.expected_speedup))
    return [{"id": f.id, "title": f.title, "severity": getattr(f, "severity", ""),
             "expected_speedup": f.expected_speedup} for f in ranked]


def build_tune_report(run: TuneRun, *, config_path: Path | None = None) -> dict[str, Any]:
    """The report.json document (schema in this module's docstring); plain data, no plots.

    ``config_path``: where torchboost.toml was written; its text is read from there
    when it exists, else rendered from ``run.config``.
    """
    from torchboost import __version__

    outcome = run.outcome
    titles = {lever.id: lever.title for lever in default_levers()} | {INTERACTION: INTERACTION_TITLE}
    per_step = outcome.baseline.samples_per_step
    kept = [d for d in outcome.decisions if d.status == "kept"]
    # Every bar after the baseline comes from one kept decision, in the same order.
    waterfall = [_waterfall_entry(step, decision, per_step)
                 for step, decision in zip(outcome.waterfall, [None, *kept])]
    decisions = [_decision_entry(d, titles, run.run_steps) for d in outcome.decisions]
    before_ms = outcome.waterfall[0].ms_per_step if outcome.waterfall else None
    after_ms = outcome.waterfall[-1].ms_per_step if outcome.waterfall else None
    reused = min(run.reused_trials, outcome.trials_run)
    trials = {"total": outcome.trials_run, "run": outcome.trials_run - reused, "reused": reused,
              "steps": run.steps_per_trial}
    status = "failed" if outcome.error is not None else ("tuned" if kept else "unchanged")
    return _finite({
        "schema_version": TUNE_SCHEMA_VERSION,
        "kind": "tune",
        "torchboost_version": __version__,
        "command": list(run.facts.command) if run.facts is not None else [],
        "status": status,
        "error": outcome.error,
        "before": {"ms_per_step": before_ms, "samples_per_s": _samples_per_s(per_step, before_ms)},
        "after": {"ms_per_step": after_ms, "samples_per_s": _samples_per_s(per_step, after_ms)},
        "speedup": outcome.speedup,
        "samples_per_step": per_step,
        "settings": dict(outcome.settings),
        "waterfall": waterfall,
        "decisions": decisions,
        "precision": [d["verdict"] for d in decisions if words.is_reduced_precision(d)],
        "findings": _findings(run.findings),
        "trials": trials,
        "run_steps": run.run_steps,
        "stopped_by_budget": outcome.stopped_by_budget,
        "elapsed_s": outcome.elapsed_s,
        "config": _config(run, config_path),
        "notes": _notes(run, trials),
    })


def write_tune_report(run: TuneRun, out_dir: Path, *, config_path: Path | None = None) -> dict[str, Path]:
    """Write report.json, report.md and report.html (waterfall plot embedded) into ``out_dir``.

    Each file is replaced atomically. Returns {"json": path, "md": path, "html": path}.
    ``config_path`` as in :func:`build_tune_report`.
    """
    from torchboost.report._tune_html import render_tune_html
    from torchboost.report._tune_markdown import render_tune_markdown

    out_dir = Path(out_dir)
    report = build_tune_report(run, config_path=config_path)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md", "html": out_dir / "report.html"}
    atomic_write_bytes(paths["json"], (json.dumps(report, indent=1, allow_nan=False) + "\n").encode("utf-8"))
    atomic_write_bytes(paths["md"], render_tune_markdown(report).encode("utf-8"))
    atomic_write_bytes(paths["html"], render_tune_html(report).encode("utf-8"))
    return paths


def print_tune_report(run: TuneRun, console: Console, paths: dict[str, Path], *, config_path: Path) -> None:
    """Print the before/after, the waterfall and every decision as rich tables, then the
    report files and ``config_path`` (the torchboost.toml written)."""
    from torchboost.report._tune_terminal import print_tune

    print_tune(build_tune_report(run, config_path=config_path), console, paths)
