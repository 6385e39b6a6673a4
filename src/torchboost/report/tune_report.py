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
                               "unverified" (one was measured faster, the end-to-end check
                               could not finish: written to torchboost.unverified.toml) |
                               "failed" (the baseline did not run; see error)
    error              str | null
    before             {ms_per_step: float | null, samples_per_s: float | null}
    after              {ms_per_step, samples_per_s}   the tuned configuration
    speedup            float   the end-to-end speedup when it was verified (see end_to_end),
                               else before / after time per step (mean of measured steps)
    search_speedup     float   before / after time per step, as the search measured it
    verdict            str     what the end-to-end check decided, in words ("" when unchecked)
    samples_per_step   int | null   batch size, when the trials saw it
    memory             {limit_bytes, limit_source, before_peak_bytes, after_peak_bytes}
                       the peak memory a kept configuration had to stay under (null: none
                       known), how it was decided in words ("90% of the GPU's 80.00 GiB",
                       "given with --memory-limit"), and the peaks of the before and after
                       configurations, bytes (null: not measured); a peak is the CUDA
                       allocator's on a GPU, the training process's peak RSS otherwise
    mfu                null | {flops_per_step, peak_flops_per_s, dtype, after_peak_flops_per_s,
                       after_dtype, before_pct, after_pct}: after_dtype is the dtype the
                       written configuration computes in (bf16 where it keeps bf16 autocast)
                       the diagnosed step's FLOPs (counted once, FlopCounterMode) over the
                       before and after time per step, against the machine's measured matmul
                       peak for the step's dtype (torchboost probe); null when either is unknown
    settings           {dotted toml key: value}   what the tuned configuration changes
    waterfall          [ {label, change, settings, ms_per_step, samples_per_s, speedup,
                          spread, ratios: [float], step_ms_range: [low, high],
                          peak_memory_bytes: int | null} ]
                       the baseline, then one entry per kept technique, in the order kept;
                       settings are cumulative; spread is max - min of the A/B pair ratios
                       that confirmed the step (0 for the baseline); step_ms_range is
                       ms_per_step scaled by the smallest and largest of those ratios
                       over their median (the plot's error bar); peak_memory_bytes: the
                       highest peak of the step's trials (null: not measured)
    decisions          [ {lever, technique, settings, change, status, reason, ratio,
                          ratios, ms_per_step, break_even_steps, peak_memory_bytes,
                          compile_cold_s, compile_warm_s, break_even, verdict} ]
                       every candidate in the order decided; status "kept" (a memory
                       lever: it brought the peak under the memory limit) | "slower" |
                       "not_beyond_noise" | "not_repaid" (its fixed cost is not repaid over
                       the planned run) | "screened_out" (another candidate of the lever was
                       faster) | "replaced" (kept, then replaced by a candidate of the same
                       lever confirmed faster) | "unconfirmed" (the budget ran out) | "incorrect" (loss
                       parity failed) | "failed" (crashed) | "skipped" (not worth trying;
                       a memory lever when nothing is over the memory limit) |
                       "over_memory" (its peak memory was over the memory limit);
                       peak_memory_bytes: the highest peak of its trials (null: none);
                       break_even_steps / break_even: the steps after which its fixed cost
                       (compile time, start-up) is repaid (a number, and words: null /
                       "never ..." when it is not faster); verdict: one line in words
                       ("bf16 was 1.8x slower here: slower"); compile_cold_s / compile_warm_s: a compile
                       candidate's compile seconds on its first run (empty cache) and on
                       every later one (cache warm: what each run of the user's pays)
    precision          [str]   the verdict line of each reduced-precision candidate
    next_step          {how: "run" | "booster" | "transformers" | "lightning" | "accelerate",
                        text: str}
                       how this script takes torchboost.toml up: torchboost run for a plain
                       script, the Booster for a Booster script, torchboost export for a
                       Lightning or Accelerate one, the TrainingArguments keywords or
                       torchboost run for a Hugging Face Trainer one
    findings           [ {id, title, severity, expected_speedup} ]   the doctor's, ranked
    trials             {total, run, reused, steps}   measurements the search used; run in a
                       fresh process this time, or reused from the journal (--resume);
                       steps: measured steps per trial (null when not recorded)
    run_steps          int | null   planned length of the real run (fixed costs are weighed
                               against it)
    run_steps_source   str     how that length was known (--run-steps, one epoch, unknown)
    stopped_by_budget  bool    the time budget ended the search before every lever was tried
    noise              {floor: float, aa_ratios: [float]}   the baseline measured against
                       itself: the largest departure from 1 of those ratios is the floor a
                       kept change had to clear
    warnings           [str]   what makes the figures less trustworthy (a busy or noisy machine)
    end_to_end         {baseline_s, tuned_s, speedup, interval [low, high], pairs, steps,
                        whole_run, noise, projected_to, baseline_runs_s, tuned_runs_s,
                        baseline_pace_ms, tuned_pace_ms, search_load_pct, baseline_loads_pct,
                        tuned_loads_pct, load_factor} | null   the tuned
                       configuration against the baseline (the user's own command when they
                       had no configuration), each run end to end as the user will run it,
                       in pairs of alternating order; interval: the lowest and highest pair
                       speedup (from five pairs, bar the extreme on each side); out_of_time:
                       fewer pairs than planned, the next would not fit; null when
                       nothing was kept or there was no time; steps: per run (null: the
                       whole script); projected_to: the planned steps that runs capped
                       at ``steps`` were projected to (each run's seconds plus the steps
                       it did not run at its own pace, baseline_pace_ms / tuned_pace_ms:
                       the mean step of each run's second half), null when not projected;
                       baseline_s, tuned_s, speedup, interval and noise are then of the
                       projected runs; *_load_pct: other processes' share of the machine
                       (percent) while the search measured the baseline, and through each
                       run; load_factor: how much the baseline side's load moving could
                       stretch a run, at most (1.0: steady)
    elapsed_s          float   seconds the search took
    config             {path: str | null, toml: str | null, state: str}   torchboost.toml, its
                       text and what the tune did to it: "written", "as it was" (your own
                       file, nothing to change) or "not written" (no file and nothing to
                       change: the text is what it would hold; null toml: the baseline failed)
    writes             {line, runs, paths: [{path, times, runs}], not_restored: [{path, why}]} | null
                       what the script wrote in your folders over every run, moved out of
                       them, and whether your folders are as they were
    unverified         {path, measured: [str], command: [str], expected_s: float | null} | null
                       the search's pick the end-to-end check could not confirm for lack of
                       time, written to torchboost.unverified.toml (torchboost.toml left as it
                       was): each kept change with its measure, and the torchboost compare
                       command that verifies it, with its expected seconds
    spent_s            {diagnosis, bursts, trials, check, total}   seconds of the tune by part
    notes              [str]   what a reader needs to trust the figures (how the time went last)

Non-finite numbers are written as null, so any JSON parser reads the file.

The report is built from plain data, the tuner's summary of a run
(its ``tune_summary``): these modules phrase and lay it out, and
know nothing of the tuner itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from torchboost._io import atomic_write_bytes
from torchboost._version import __version__
from torchboost.report._tune_html import render_tune_html
from torchboost.report._tune_markdown import render_tune_markdown
from torchboost.report._tune_terminal import print_tune
from torchboost.report import _tune_text as words
from torchboost.report.doctor_report import _finite

__all__ = ["TUNE_SCHEMA_VERSION", "build_tune_report", "write_tune_report", "print_tune_report"]

TUNE_SCHEMA_VERSION = 1
"""Version of the tuner's report.json layout documented in this module."""


_DECISION_KEYS = ("lever", "technique", "settings", "change", "status", "reason", "ratio", "ratios",
                  "ms_per_step", "break_even_steps", "peak_memory_bytes", "compile_cold_s", "compile_warm_s")
"""A summary decision's keys that report.json keeps as they are, in its order."""


def _decision_entry(d: dict[str, Any], run_steps: int | None, pick: str) -> dict[str, Any]:
    entry = {key: d[key] for key in _DECISION_KEYS}
    entry["break_even"] = words.break_even(d, run_steps)
    entry["verdict"] = words.verdict(d, pick)
    return entry


def _reduced_precision(summary: dict[str, Any], decisions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report's decisions whose lever lowers numeric precision (bf16, fp16, tf32)."""
    return [entry for d, entry in zip(summary["decisions"], decisions) if d["reduced_precision"]]


def _notes(summary: dict[str, Any]) -> list[str]:
    trials = summary["trials"]
    notes = [
        "Each technique was tried on top of those kept before it, measured against them in "
        "alternating pairs (A B A B), and kept only when its median ratio beat the noise "
        "margin and its losses matched the baseline's (same seed, same data).",
        f"{trials['total']} trials: {trials['run']} run now, {trials['reused']} reused from the journal"
        + (f"; {trials['steps']} measured steps each, after the warm-up." if trials.get("steps") else "."),
    ]
    if summary["run_steps"]:
        source = f" ({summary['run_steps_source']})" if summary.get("run_steps_source") else ""
        notes.append(f"Planned run: {words.steps(summary['run_steps'])}{source}; a change that adds a fixed "
                     "cost (torch.compile's compile time, worker start-up) is kept only if it is repaid within them.")
    else:
        notes.append("The planned run length is unknown (pass --run-steps): torch.compile was judged "
                     "on its step time alone, not on whether its compile time is repaid.")
    if summary["stopped_by_budget"]:
        notes.append(f"The time budget stopped the search after {summary['elapsed_s']:.0f} s: the result "
                     "is the best found so far; run again with a larger --budget (and --resume) to try the rest.")
    else:
        notes.append(f"The search finished within its time budget ({summary['elapsed_s']:.0f} s).")
    if summary.get("writes"):
        notes.append(summary["writes"]["line"])
    spent = _spent_line(summary)
    if spent:
        notes.append(spent)
    return notes


def _spent_line(summary: dict[str, Any]) -> str:
    """How the budget went, in seconds ("" when not recorded): the diagnosis, the burst trials,
    the other trials, the end-to-end check, and the whole tune against --budget."""
    spent = summary.get("spent_s") or {}
    if "total" not in spent:
        return ""
    trials, bursts = summary["trials"]["total"], summary.get("burst_trials", 0)
    budget = summary.get("budget_s") or 0.0
    against = f" for --budget {budget:.0f} s" if budget else ""
    return (f"How the time went: the diagnosis {spent.get('diagnosis', 0.0):.0f} s, {bursts} burst trial(s) "
            f"{spent.get('bursts', 0.0):.0f} s, {trials - bursts} other trial(s) {spent.get('trials', 0.0):.0f} s, "
            f"the end-to-end check {spent.get('check', 0.0):.0f} s: {spent['total']:.0f} s in all{against}.")


def build_tune_report(summary: dict[str, Any]) -> dict[str, Any]:
    """The report.json document (schema in this module's docstring); plain data, no plots.

    ``summary``: a tuning run as plain data, from the tuner's ``tune_summary``.
    """
    decisions = [_decision_entry(d, summary["run_steps"], summary["status"]) for d in summary["decisions"]]
    return _finite({
        "schema_version": TUNE_SCHEMA_VERSION,
        "kind": "tune",
        "torchboost_version": __version__,
        "command": list(summary["command"]),
        "status": summary["status"],
        "error": summary["error"],
        "before": summary["before"],
        "after": summary["after"],
        "speedup": summary["speedup"],
        "search_speedup": summary["search_speedup"],
        "samples_per_step": summary["samples_per_step"],
        "memory": summary.get("memory") or _NO_MEMORY,
        "mfu": summary.get("mfu"),
        "settings": summary["settings"],
        "waterfall": summary["waterfall"],
        "decisions": decisions,
        "precision": [entry["verdict"] for entry in _reduced_precision(summary, decisions)],
        "findings": summary["findings"],
        "trials": summary["trials"],
        "run_steps": summary["run_steps"],
        "run_steps_source": summary.get("run_steps_source", ""),
        "stopped_by_budget": summary["stopped_by_budget"],
        "noise": summary["noise"],
        "warnings": summary["warnings"],
        "end_to_end": summary["end_to_end"],
        "verdict": summary["verdict"],
        "elapsed_s": summary["elapsed_s"],
        "config": summary["config"],
        "next_step": summary.get("next_step") or {"how": "booster", "text": _BOOSTER_STEP},
        "writes": summary.get("writes"),
        "unverified": summary.get("unverified"),
        "spent_s": summary.get("spent_s") or {},
        "notes": _notes(summary),
    })


_NO_MEMORY = {"limit_bytes": None, "limit_source": "", "before_peak_bytes": None, "after_peak_bytes": None}
"""A summary from before memory was reported: nothing known."""

_BOOSTER_STEP = "torchboost.Booster() in your training loop reads it from the working directory"


def write_tune_report(summary: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write report.json, report.md and report.html (waterfall plot embedded) into ``out_dir``.

    Each file is replaced atomically. Returns {"json": path, "md": path, "html": path}.
    ``summary`` as in :func:`build_tune_report`.
    """
    out_dir = Path(out_dir)
    report = build_tune_report(summary)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md", "html": out_dir / "report.html"}
    atomic_write_bytes(paths["json"], (json.dumps(report, indent=1, allow_nan=False) + "\n").encode("utf-8"))
    atomic_write_bytes(paths["md"], render_tune_markdown(report).encode("utf-8"))
    atomic_write_bytes(paths["html"], render_tune_html(report).encode("utf-8"))
    return paths


def print_tune_report(summary: dict[str, Any], console: Console, paths: dict[str, Path]) -> None:
    """Print the before/after, the waterfall and every decision as rich tables, then the
    report files and the torchboost.toml written (``summary["config"]["path"]``)."""
    report = build_tune_report(summary)
    print_tune(report, console, paths, precision=_reduced_precision(summary, report["decisions"]))
