"""The doctor's report: ``report.json`` (documented below), ``report.md`` and ``report.html``.

``report.json`` schema (``schema_version`` 1). Times in milliseconds, shares in percent::

    schema_version     int     1; bumped when a key changes meaning or disappears
    torchboost_version str
    command            [str]   the observed command line
    ended              str     "stopped" (after the planned steps) | "finished" (the script
                               ended on its own) | "crashed"
    exit_code          int     the script's exit status
    steps_observed     int     steps recorded (warm-up excluded by the observer)
    steps_measured     int     steps the statistics rest on
    step_time_ms       {median, p90, mean: float | null}   null when no step was observed
    breakdown_pct      {data, forward, backward, optimizer, checkpoint, output, other: float}
                       sums to ~100; checkpoint (torch.save) and output (printing and
                       logging) are the host's calls outside the loop's phases, carved
                       out of other (0.0 where none ran)
    phase_ms           {the same phases: float}   mean per step
    samples_per_s      float | null   null when the batch size is unknown
    evaluation         {ms, pct, passes}   evaluation run between the measured steps (a
                       trained model called with gradients off, until training resumes):
                       outside the steps' time and phases; ms in all, pct of the span
    findings           [ {id, title, severity ("high"|"medium"|"low"),
                          evidence {name: number | str},
                          fix {toml: str, torch: str, lightning?: str, accelerate?: str, transformers?: str},
                          expected_speedup: float, unit ("step"|"sample"),
                          changes_training: false, memory_ratio: null, formula: str,
                          measured: null | {ratio, steps, label}, notes: [str]} ]
                       the numerically neutral speedups, ranked by the measured ratio
                       (a quick probe's) or else expected_speedup, largest first, one
                       measured slower than plain last (per step: the same samples per step)
    training_changes   [ the same fields, changes_training: true ]   fixes that change
                       what is trained (a larger batch): listed apart, never ranked with
                       the findings; their figure is per sample (unit "sample")
    memory_fixes       [ the same fields, memory_ratio: float ]   fixes that trade time for
                       memory (peak before / after = memory_ratio; expected_speedup is the
                       time cost, below 1): listed apart, the way to fit in memory
    notes              [str]   how the run ended and what that means for the figures
    gpu                null | GpuFacts (torchboost.diagnose.gpu): busy_pct, idle_pct,
                       compute_pct, non_compute_pct, kernel/memcpy/memset ms, kernels,
                       small_kernel_pct, h2d_pageable_count/bytes, syncs, sync_ops,
                       collective_ms, collective_overlap_pct, steps (from a trace)
    compile            null | {compile_s, tracing_s, backend_s, code_gen_s (seconds), cache
                       ("cold" | "warm" | ""), cache_hits, cache_misses, cache_dir, graphs,
                       frames, recompile_limit, first_step_ms, step_ms (compiled, median),
                       graph_breaks [{reason, where (file:line), code, fix, count}],
                       recompiles [{function, where, reasons, count, kind, fix}]}
                       what torch.compile did in the script; null when nothing compiled
    job                null | {world_size, ranks_observed, slowest_rank, spread_pct,
                               collective_ms_per_step, collective_overlap_pct}
                       a torchrun job: every figure above is the slowest rank's
    ranks              [ {rank, step_time_ms, phase_ms, collective_ms_per_step,
                          collective_overlap_pct} ]   each rank of a job ([] alone)
    headroom           null | {flops_per_step, achieved_flops_per_s, peak_flops_per_s, dtype,
                       mfu_pct, bound ("data"|"host"|"compute"|"memory"), why, best_speedup,
                       machine {name, device, threads, cpu_share, peak_flops_per_s {dtype: float},
                       bandwidth_bytes_per_s}, notes [str], line (the sentence the reports
                       lead with), ops [{name, ms_per_step, flops, bytes, intensity,
                       achieved_flops_per_s, achieved_bytes_per_s, roof_flops_per_s,
                       pct_of_roof, bound}] (the hottest operators against their roofs:
                       torchboost.diagnose.roofline)}   the step against the machine's
                       measured matmul peak (torchboost.diagnose.headroom); null when not
                       measured (a trace)
    trace              str | null   profiler trace file, relative to the report folder
    facts              object  torchboost.evidence.observed.Facts.to_dict(): everything observed;
                       facts.trainer: a Hugging Face Trainer's TrainingArguments (TrainerFacts:
                       max_steps, num_train_epochs, gradient_accumulation_steps, bf16, fp16,
                       tf32, torch_compile, optim, dataloader_*), null without one;
                       facts.planned_steps / planned_from: the run's length and what gave it

Non-finite numbers (a NaN loss) are written as null, so any JSON parser reads the file.
"""

from __future__ import annotations

import dataclasses

import json
import math
import statistics
from pathlib import Path
from typing import Any

from rich.console import Console

from torchboost.frameworks import finding_words
from torchboost._version import __version__
from torchboost.report.host_lines_section import host_lines_section
from torchboost.report.compile_section import compile_section
from torchboost._io import atomic_write_bytes
from torchboost.report.html import render_html
from torchboost.report.markdown import render_markdown
from torchboost.report.terminal import print_report
from torchboost.evidence.host_side import HostFacts
from torchboost.evidence.observed import Facts, optimizer_label
from torchboost.evidence.findings import Finding
from torchboost.evidence.steps import OUTLIER_RATIO, Summary, evaluation_share, summarize
from torchboost.diagnose.headroom import Headroom

__all__ = ["SCHEMA_VERSION", "build_report", "run_notes", "write_doctor_report", "print_doctor_report"]

SCHEMA_VERSION = 1
"""Version of the report.json layout documented in this module."""

_FEW_STEPS = 5
_JITTER_RATIO = 1.5


def ending_words(facts: Facts) -> str | None:
    """How a stalled, killed or self-ended run ended, in words; None for any other ending."""
    if facts.ended == "stalled" and facts.stall and facts.stall.get("own"):
        stall = facts.stall
        return (f"torchboost ended the run: {stall['doing']} after step {stall['at_step']} took "
                f"{stall['after_s']:.0f} s, past its {stall['limit_s']:.0f} s bound (not a stall of the script's)")
    if facts.ended == "stalled" and facts.stall:
        stall = facts.stall
        return (f"The script stalled: no training step for {stall['after_s']:.0f} s (limit {stall['limit_s']:.0f} s, "
                f"--stall-timeout), the script {stall['doing']} at step {stall['at_step']}; torchboost ended it")
    if facts.ended == "killed":
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if facts.signal == "SIGKILL" else ""
        return f"The script was killed by {facts.signal or 'a signal'}{hint}, exit code {facts.exit_code}"
    if facts.ended == "exited":
        return (f"The script ended its own process (os._exit or the like) after {facts.steps_seen} steps, "
                f"exit code {facts.exit_code}, before torchboost could write what it saw last")
    return None


def optimizer_notes(facts: Facts) -> list[str]:
    """One note per optimizer beyond the one whose steps are the training steps (a GAN's
    second), with how often each stepped."""
    primary = next((o for o in facts.optimizers if o.get("primary")), None)
    if primary is None:
        return []
    return [f"A second optimizer stepped too: {optimizer_label(o)}, {o['steps']} steps while "
            f"{optimizer_label(primary)} (whose steps are the training steps) took {primary['steps']}; "
            "its time counts in the optimizer phase, and the findings speak of the first."
            for o in facts.optimizers if not o.get("primary")]


def evaluation_note(facts: Facts, summary: Summary) -> str:
    """The evaluation the script ran between its training steps, its line, its cost a pass,
    its passes in the planned run and its share of the run's time, in words."""
    passes, share = summary.evaluation_passes, evaluation_share(facts)
    at = f" at {share['where']}" if share and share["where"] else ""
    planned = ""
    if share and facts.planned_steps:
        runs = facts.planned_steps // share["every"]
        planned = f", about {runs} passes in the planned {facts.planned_steps} steps"
    return (f"Evaluation{at} (the model called with gradients off, or in eval mode, until training resumed): "
            f"{summary.evaluation_ms / 1000.0:.2f} s in {passes} pass{'es' if passes > 1 else ''} over the "
            f"{summary.steps_measured} measured steps ({summary.evaluation_ms / max(passes, 1):.0f} ms a pass, every "
            f"{share['every'] if share else '?'} steps{planned}), {summary.evaluation_pct:.0f}% of the run's time; "
            "left out of the step time and the phases above, which are training's.")


def checkpoint_note(host: HostFacts | None, summary: Summary) -> list[str]:
    """How the checkpoint writes sit in the phase table, in words ([] where none was timed in it)."""
    if host is None or not host.checkpoint_ms or not summary.phase_ms.get("checkpoint"):
        return []
    every, written = host.checkpoint_every(), host.checkpoint_bytes_median()
    each = statistics.median(host.checkpoint_ms)
    size = f", {written / 1e6:.1f} MB" if written else ""
    how_often = f" every {every} steps" if every else ""
    return [f"torch.save ran{how_often} ({len(host.checkpoint_ms)} writes seen, {each:.1f} ms{size} each): its "
            f"time is spread over the steps in the phase table, which then adds up to the mean step "
            f"({sum(summary.phase_ms.values()):.2f} ms), above the median."]


def run_notes(facts: Facts, summary: Summary, findings: list[Finding]) -> list[str]:
    """What a reader must know to trust the figures: how the run ended, how much was seen."""
    n = summary.steps_observed
    notes: list[str] = []
    if n == 0:
        notes.append("No training step was observed: the script ended before its first "
                     "optimizer.step() (or backward()), so there is nothing to diagnose.")
    if facts.ended == "trace":
        notes.append(f"Diagnosed from a recorded trace ({facts.env.get('trace', 'a file')}): {n} profiled steps. "
                     "A trace shows the data-loader wait; forward, backward and the optimizer are not marked "
                     "in it, so they count as other.")
    if facts.gpu:
        g = facts.gpu
        notes.append(f"GPU: busy {g['busy_pct']:.1f}%, idle {g['idle_pct']:.1f}% of its {g['span_ms']:.1f} ms span "
                     f"(compute {g['compute_pct']:.1f}%, communication and copies {g['non_compute_pct']:.1f}%); "
                     f"{g['kernels']} kernels, {g['small_kernel_pct']:.0f}% under 10 µs; {g['syncs']} syncs; "
                     f"{g['h2d_pageable_count']} pageable host-to-device copies.")
    ending = ending_words(facts)
    if ending:
        notes.append(f"{ending}; the figures cover the {n} steps observed before.")
    elif facts.ended == "crashed":
        notes.append(f"The script crashed (exit code {facts.exit_code}) after {n} observed steps; "
                     "the figures cover the steps before the crash.")
    elif facts.ended == "finished":
        if facts.target_steps and n < facts.target_steps:
            notes.append(f"The script ended after {n} of {facts.target_steps} steps; "
                         f"the figures rest on those {n}.")
        else:
            notes.append(f"The script ran to its end; {n} steps observed.")
    elif n and facts.ended != "trace":
        source = f" ({facts.planned_from})" if facts.planned_from else ""
        planned = f"; the script would have run {facts.planned_steps}{source}" if facts.planned_steps else ""
        ended = f" ({facts.recording_ended})" if facts.recording_ended and "as asked" not in facts.recording_ended \
            else ", as planned"
        notes.append(f"Stopped after {n} observed steps{ended}, after {facts.warmup_steps} "
                     f"unrecorded warm-up steps{planned}.")
    if summary.steps_set_aside:
        notes.append(f"{summary.steps_set_aside} of {summary.steps_measured} measured steps took over "
                     f"{OUTLIER_RATIO}x or under 1/{OUTLIER_RATIO} of the median step (another process, a "
                     "collection pause, a recompile): the phase table and the findings rest on the other "
                     f"{summary.steps_measured - summary.steps_set_aside}.")
    notes += ([evaluation_note(facts, summary)] if summary.evaluation_passes else []) + checkpoint_note(facts.host, summary)
    if 0 < summary.steps_measured < _FEW_STEPS:
        notes.append(f"Only {summary.steps_measured} steps measured: timings are rough; observe more with --steps.")
    median, p90 = summary.step_time_ms["median"], summary.step_time_ms["p90"]
    if median and p90 and p90 > _JITTER_RATIO * median:
        notes.append(f"Step times vary: p90 is {p90 / median:.1f}x the median "
                     "(stalls, garbage collection, recompiles or a busy machine).")
    if facts.step_source == "backward" and n:
        notes.append("No optimizer was seen stepping; steps were counted at each backward().")
    notes += optimizer_notes(facts)
    if findings:
        notes.append("Expected speedups are estimates for one change at a time and do not multiply "
                     "exactly; torchboost tune measures them.")
    elif n:
        notes.append("No rule fired: nothing obvious bounds this step at the default thresholds.")
    return notes + _profile_notes(facts)


def _profile_notes(facts: Facts) -> list[str]:
    """Where the profiler's trace is, or why there is none (its error)."""
    if facts.profile and facts.profile.trace_path:
        return [f"Profiler trace: {facts.profile.trace_path} (open it in ui.perfetto.dev)."]
    return [f"The profiler: {facts.profile_error}."] if facts.profile_error else []


def _finite(value: Any) -> Any:
    # NaN/inf are not JSON; a browser's JSON.parse rejects them.
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _finding_entry(finding: Finding) -> dict[str, Any]:
    return {
        "id": finding.id,
        "title": finding.title,
        "severity": finding.severity,
        "evidence": dict(finding.evidence),
        "fix": finding_words(finding),
        "expected_speedup": finding.expected_speedup,
        "unit": finding.unit,
        "changes_training": finding.changes_training,
        "blocking": finding.blocking,
        "memory_ratio": finding.memory_ratio,
        "formula": finding.formula,
        "measured": dataclasses.asdict(finding.measured) if finding.measured is not None else None,
        "notes": list(finding.notes),
    }


def _rank_entry(facts: Facts) -> dict[str, Any]:
    summary = summarize(facts)
    profile = facts.profile
    return {"rank": facts.rank, "step_time_ms": dict(summary.step_time_ms), "phase_ms": dict(summary.phase_ms),
            "collective_ms_per_step": profile.collective_ms_per_step if profile else None,
            "collective_overlap_pct": profile.collective_overlap_pct if profile else None}


def job_summary(ranks: list[Facts], job: Facts) -> dict[str, Any] | None:
    """The job across its ranks: the slowest, the spread of mean step times, collectives."""
    if len(ranks) < 2:
        return None
    means = {f.rank: summarize(f).step_time_ms["mean"] or 0.0 for f in ranks}
    fastest = min(means.values())
    collectives = [f.profile.collective_ms_per_step for f in ranks if f.profile]
    overlaps = [f.profile.collective_overlap_pct for f in ranks if f.profile and f.profile.collective_overlap_pct is not None]
    return {"world_size": job.world_size, "ranks_observed": len(ranks), "slowest_rank": job.rank,
            "spread_pct": 100.0 * (max(means.values()) - fastest) / fastest if fastest else None,
            "collective_ms_per_step": sum(collectives) / len(collectives) if collectives else None,
            "collective_overlap_pct": sum(overlaps) / len(overlaps) if overlaps else None}


def _job_note(job: dict[str, Any] | None) -> list[str]:
    if job is None:
        return []
    note = (f"A job of {job['world_size']} ranks ({job['ranks_observed']} observed): the figures "
            f"are rank {job['slowest_rank']}'s, the slowest; mean step times spread {job['spread_pct']:.1f}%")
    if job["collective_ms_per_step"]:
        overlap = job["collective_overlap_pct"]
        note += (f"; collectives take {job['collective_ms_per_step']:.2f} ms per step"
                 + (f", {overlap:.0f}% of it overlapped with compute" if overlap is not None else ""))
    return [note + "."]


def build_report(facts: Facts, findings: list[Finding], ranks: list[Facts] | None = None,
                 headroom: Headroom | None = None, writes: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report.json document (schema in this module's docstring); plain data, no plots.

    ``ranks``: every rank's facts under torchrun (``facts`` is then the slowest rank's);
    ``headroom``: the step against the machine's measured peak, when measured; ``writes``:
    what the script wrote in the user's folders and where it was kept apart ({"line", ...})."""
    summary = summarize(facts)
    job = job_summary(ranks or [], facts)
    return _finite({
        "schema_version": SCHEMA_VERSION,
        "torchboost_version": __version__,
        "command": list(facts.command),
        "ended": facts.ended,
        "exit_code": facts.exit_code,
        "steps_observed": summary.steps_observed,
        "steps_measured": summary.steps_measured,
        "step_time_ms": dict(summary.step_time_ms),
        "breakdown_pct": dict(summary.breakdown_pct),
        "phase_ms": dict(summary.phase_ms),
        "steps_set_aside": summary.steps_set_aside,
        "host_lines": host_lines_section(facts),
        "evaluation": {"ms": summary.evaluation_ms, "pct": summary.evaluation_pct,
                       "passes": summary.evaluation_passes},
        "samples_per_s": summary.samples_per_s,
        "findings": [_finding_entry(f) for f in findings if not f.changes_training and f.memory_ratio is None],
        "training_changes": [_finding_entry(f) for f in findings if f.changes_training],
        "memory_fixes": [_finding_entry(f) for f in findings if f.memory_ratio is not None and not f.changes_training],
        "notes": (_job_note(job) + run_notes(facts, summary, findings) + list(headroom.notes if headroom else ())
                  + ([writes["line"]] if writes else [])),
        "writes": writes,
        "job": job,
        "gpu": facts.gpu,
        "compile": compile_section(facts),
        "headroom": headroom.to_dict() if headroom is not None else None,
        "ranks": [_rank_entry(f) for f in ranks] if job else [],
        "processes": [f.process for f in (ranks or [facts]) if f.process],
        "trace": facts.profile.trace_path if facts.profile else None,
        "facts": facts.to_dict(),
    })


def write_doctor_report(facts: Facts, findings: list[Finding], out_dir: Path,
                        ranks: list[Facts] | None = None, headroom: Headroom | None = None,
                        writes: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write report.json, report.md and report.html (plots embedded) into ``out_dir``.

    Each file is replaced atomically. Returns {"json": path, "md": path, "html": path}.
    """
    out_dir = Path(out_dir)
    report = build_report(facts, findings, ranks, headroom, writes)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md", "html": out_dir / "report.html"}
    atomic_write_bytes(paths["json"], (json.dumps(report, indent=1, allow_nan=False) + "\n").encode("utf-8"))
    atomic_write_bytes(paths["md"], render_markdown(report).encode("utf-8"))
    atomic_write_bytes(paths["html"], render_html(report, facts.steps).encode("utf-8"))
    return paths


def print_doctor_report(facts: Facts, findings: list[Finding], console: Console, paths: dict[str, Path],
                        ranks: list[Facts] | None = None, headroom: Headroom | None = None,
                        writes: dict[str, Any] | None = None) -> None:
    """Print the breakdown and the ranked findings as rich tables, then where the files are."""
    print_report(build_report(facts, findings, ranks, headroom, writes), console, paths)
