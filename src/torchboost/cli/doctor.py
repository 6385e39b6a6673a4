"""Diagnose an unmodified training script: run a few steps under observation, say what bounds them.

``torchboost doctor [--steps N] [--warmup W] [--out DIR] [--json] [--full] -- python train.py ARGS``,
or ``torchboost doctor --trace FILE|DIR [--out DIR]`` for a trace recorded elsewhere

Runs the script in a child process with instrumentation injected
(:mod:`torchboost.observe.child.bootstrap`), stops it after ``W + N`` steps and a short
profiler window, then diagnoses the facts and writes the report folder. Exit status:
the script's own when it crashed, 128 + N when signal N killed it (137: SIGKILL, the
OOM killer's), 124 when it stalled (no step for ``--stall-timeout``; the partial report
is written), 128 + N when torchboost itself got SIGINT/SIGTERM/SIGHUP (the script's
process group is ended), 2 on bad usage, otherwise the command's own (also when no
training step was seen: the message says so and names the processes that ran).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from torchboost import out_folder
from torchboost.diagnose import Facts, diagnose
from torchboost.diagnose.headroom import Headroom, cap_findings, measured_headroom
from torchboost.env import LoadMeter
from torchboost.evidence.steps import warmup_only_words
from torchboost.report.limits_text import shared_run_words
from torchboost.cli._inputs import check_out_dir, check_seconds
from torchboost.process.launch import parse_launch
from torchboost.process.no_stdin import stdin_words
from torchboost.observe.parent.request import DOCTOR_PRECISION, DOCTOR_RECORD_S, RunRequest, doctor_bounds
from torchboost.observe.parent.supervise import ObservedRun, Progress, UsageError, job_facts, run_observed
from torchboost.diagnose.trace_file import facts_from_trace, load_traces
from torchboost.report.doctor_report import ending_words, print_doctor_report, write_doctor_report
from torchboost.cli._console import console as make_console

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the doctor's options to its sub-command parser."""
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="recorded steps after warm-up, exactly (default: at most 20, fewer once the median step "
                             f"is known within {100 * DOCTOR_PRECISION:.0f}%% or {DOCTOR_RECORD_S:.0f} s of steps are recorded)")
    parser.add_argument("--warmup", type=int, default=None, metavar="W",
                        help="unrecorded warm-up steps, exactly (default: at most 5, fewer once they settled)")
    parser.add_argument("--out", default="torchboost-doctor", metavar="DIR",
                        help="report folder: a new or empty folder, or one torchboost made (default "
                             "./torchboost-doctor); a folder of your files is refused")
    parser.add_argument("--json", action="store_true", help="print report.json to stdout instead of tables")
    parser.add_argument("--full", action="store_true", help="let the script run to its end, recording every step")
    parser.add_argument("--trace", metavar="FILE", default=None,
                        help="diagnose a Kineto trace recorded elsewhere (.json or .json.gz, or a folder of one "
                             "per rank) instead of running a script")
    parser.add_argument("--stall-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="end the script when no training step comes for this long (or 20 median steps, "
                             "when longer), with a partial report (default 60)")


def run(args: argparse.Namespace) -> int:
    """Observe ``args.command``, diagnose, report; returns the exit status (see module docstring)."""
    err = make_console(stderr=True)
    if args.trace is not None:
        return _from_trace(args)
    try:
        parse_launch(args.command)  # a missing script is said before the report folder is made
        check_seconds(args.stall_timeout, "--stall-timeout")
        check_out_dir(args.out)
    except UsageError as exc:
        print(f"torchboost doctor: error: {exc}", file=sys.stderr)
        return 2
    with out_folder.in_use(args.out):
        return _diagnose(args, err)


def _diagnose(args: argparse.Namespace, err: Console) -> int:
    """The run observed, diagnosed and reported in the report folder claimed; the exit status."""
    try:
        with LoadMeter() as load:  # what a neighbour took from the run's figures
            observed = _observe(args, err)
    except UsageError as exc:
        print(f"torchboost doctor: error: {exc}", file=sys.stderr)
        return 2
    facts = observed.facts
    if observed.writes is not None and (observed.writes.kept_apart or observed.writes.not_restored):
        err.print(f"torchboost doctor: {observed.writes.words()}.", highlight=False)
    if facts is not None and ending_words(facts):
        err.print(f"torchboost doctor: {ending_words(facts)}.", highlight=False)
    if observed.exit_code and stdin_words(observed.stderr_tail):
        err.print(f"torchboost doctor: {stdin_words(observed.stderr_tail)}.", highlight=False)
    if facts is None or not facts.steps:
        _explain_no_steps(observed, err)
        return observed.exit_code  # the command's own: a script that only infers exits 0
    shared = shared_run_words(load.pct)
    if shared is not None:
        err.print(f"torchboost doctor: {shared}.", highlight=False)
    headroom = _headroom(facts, err, shared)
    findings = cap_findings(diagnose(facts), headroom)
    writes = _writes(observed)
    paths = write_doctor_report(facts, findings, observed.out_dir, observed.ranks, headroom, writes)
    if args.json:
        report = next((Path(p) for p in paths.values() if Path(p).name == "report.json"), None)
        sys.stdout.write(report.read_text(encoding="utf-8") if report else "{}\n")
    else:
        print_doctor_report(facts, findings, make_console(), paths, observed.ranks, headroom, writes)
    return observed.exit_code


def _writes(observed: ObservedRun) -> dict[str, object]:
    """What the script wrote in the user's folders, for the report: kept apart and the
    user's files put back, or, under ``--full`` (the user's real run), left where they are."""
    if observed.writes is None:
        return {"line": "--full is your real run: what the script wrote stays where it wrote it"}
    return {"line": observed.writes.words(), **observed.writes.to_dict()}


def _headroom(facts: Facts, err: Console, shared: str | None = None) -> Headroom | None:
    """The step against this machine's measured peak: the probe's cached figures, measured
    (a few seconds, after the script has ended) when absent or when the cached probe ran on
    a busy machine (the best of both is kept); None when it fails. ``shared``: the note that
    the run itself shared the machine."""
    try:
        with err.status("measuring this machine's matmul peak (once per machine)..."):
            return measured_headroom(facts, shared)
    except Exception as exc:  # noqa: BLE001 - the report is written without it
        err.print(f"torchboost doctor: the machine's limits could not be measured ({type(exc).__name__}: {exc}); "
                  "the report has no headroom.", highlight=False)
        return None


def _from_trace(args: argparse.Namespace) -> int:
    """``doctor --trace``: the same report files, from a trace recorded elsewhere."""
    try:
        if args.command:
            raise UsageError("--trace diagnoses a recorded trace: give it no command after --")
        out_folder.check(args.out)  # refused before the trace is read; made once it was read
        ranks = [facts_from_trace(file, data, i) for i, (file, data) in enumerate(load_traces(args.trace))]
        out = check_out_dir(args.out)
    except UsageError as exc:
        print(f"torchboost doctor: error: {exc}", file=sys.stderr)
        return 2
    ranks.sort(key=lambda f: f.rank)
    facts = job_facts(ranks)
    findings = diagnose(facts)
    with out_folder.in_use(out):
        paths = write_doctor_report(facts, findings, out, ranks)
    if args.json:
        sys.stdout.write(Path(paths["json"]).read_text(encoding="utf-8"))
    else:
        print_doctor_report(facts, findings, make_console(), paths, ranks)
    return 0


def _observe(args: argparse.Namespace, err: Console) -> ObservedRun:
    def show(progress: Progress) -> None:
        status.update(progress.words())

    with err.status("starting the script under observation...") as status:
        request = RunRequest(command=args.command, out_dir=args.out, stall_timeout_s=args.stall_timeout,
                             **doctor_bounds(args.steps, args.warmup, full=args.full))
        return run_observed(request, on_progress=show, stdout=(lambda: sys.stderr) if args.json else None)


def _explain_no_steps(observed: ObservedRun, err: Console) -> None:
    seen = observed.steps_seen
    if seen and observed.facts is not None and not observed.exit_code:
        err.print(f"torchboost doctor: {warmup_only_words(seen, observed.facts.warmup_steps)}.", highlight=False)
    elif seen and observed.exit_code:  # it crashed during warm-up: its error, not --warmup, is the news
        err.print(f"torchboost doctor: the script exited with status {observed.exit_code} after {seen} training "
                  "step(s), before any was recorded (warm-up steps are not); nothing to diagnose: its error, "
                  "if it printed one, is above.", highlight=False)
    elif seen:  # the facts were never written: the process ended itself during warm-up
        err.print(f"torchboost doctor: the script ended after {seen} training step(s), before any was "
                  "recorded (warm-up steps are not); nothing to diagnose. Lower --warmup "
                  "(or give the script more steps).", highlight=False)
    elif observed.exit_code:
        err.print(f"torchboost doctor: the script exited with status {observed.exit_code} "
                  "before completing a training step; nothing to diagnose.", highlight=False)
    elif observed.processes:
        err.print("torchboost doctor: no training step seen: no process of the command called "
                  "optimizer.step() or loss.backward(). The Python processes that ran: "
                  f"{'; '.join(observed.processes)}. Point the doctor at a command that trains.", highlight=False)
    else:
        err.print("torchboost doctor: no training step seen: the script never called optimizer.step() "
                  "or loss.backward(). Point the doctor at a script that trains (a loop with a "
                  "backward and an optimizer step).", highlight=False)
