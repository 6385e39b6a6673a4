"""Diagnose and tune a built-in training workload: the whole method, on any machine.

``torchboost demo [--workload vision] [--budget SECONDS] [--out DIR]`` runs the doctor
on a built-in workload (no data and no GPU needed), then the tuner, and prints the
before/after. The tuned ``torchboost.toml`` and the reports land in DIR.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from pathlib import Path


from torchboost import out_folder
from torchboost.cli._inputs import check_out_dir
from torchboost.cli.tune import print_outcome, tune_with_progress
from torchboost.diagnose import diagnose
from torchboost.observe.parent.request import RunRequest
from torchboost.observe.parent.supervise import UsageError, run_observed
from torchboost.report.doctor_report import print_doctor_report, write_doctor_report
from torchboost.tune.budget import process_age_s
from torchboost.tune.tuner import TuneOptions
from torchboost.cli._console import console as make_console

__all__ = ["add_arguments", "apply_hint", "run", "demo_command", "DEMO_WORKLOADS"]

DEMO_WORKLOADS = ("vision", "mlp", "data", "gpt")
"""Built-in workloads the demo can run (``torchboost.workloads.NAME``)."""

DEMO_RUN_STEPS = 400
"""The run length the demo plans for: compile must pay for itself within it."""


def demo_command(workload: str, *, steps: int = DEMO_RUN_STEPS) -> list[str]:
    """The command the demo diagnoses and tunes: the workload's plain training script."""
    return [sys.executable, "-m", f"torchboost.workloads.{workload}", "--size", "tiny", "--steps", str(steps)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``torchboost demo``."""
    parser.add_argument("--workload", default="vision", choices=DEMO_WORKLOADS,
                        help="built-in workload to tune (default vision: loader-bound on a CPU)")
    parser.add_argument("--out", default="torchboost-demo", help="report folder (default torchboost-demo)")
    parser.add_argument("--budget", type=float, default=120.0, metavar="SECONDS",
                        help="time budget of the doctor and the search together (default 120); the end-to-end "
                             "check has time kept for it, and the demo ends within 1.5x the budget")
    parser.add_argument("--steps-per-trial", type=int, default=20, metavar="N",
                        help="measured steps per trial (default 20)")
    parser.add_argument("--warmup", type=int, default=3, metavar="N", help="warm-up steps per trial (default 3)")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``torchboost demo``: doctor, then tune, then the before/after."""
    if args.command:
        print("torchboost demo: error: the demo runs a built-in workload and takes no command "
              "after '--'; use 'torchboost tune -- python train.py' for your own script", file=sys.stderr)
        return 2
    if not math.isfinite(args.budget) or args.budget <= 0 or args.steps_per_trial < 3 or args.warmup < 1:
        print("torchboost demo: error: --budget must be positive, --steps-per-trial >= 3, --warmup >= 1",
              file=sys.stderr)
        return 2
    try:
        out = check_out_dir(args.out)
    except UsageError as exc:
        print(f"torchboost demo: error: {exc}", file=sys.stderr)
        return 2
    with out_folder.in_use(out):
        return _demo(args, out)


def _demo(args: argparse.Namespace, out: Path) -> int:
    """The three moments on the built-in workload, in the report folder claimed."""
    command = demo_command(args.workload)
    console = make_console()
    err = make_console(stderr=True)
    console.rule(f"[bold]torchboost demo[/]: the built-in '{args.workload}' workload")
    console.print(f"command: {' '.join(command[1:])}  (plain PyTorch, unmodified)\n", highlight=False)

    console.rule("1. doctor: what bounds each step")
    try:
        with err.status("observing the baseline..."):
            observed = run_observed(RunRequest(command=command, steps=args.steps_per_trial, warmup=args.warmup,
                                               out_dir=out / "doctor", echo=False))
    except UsageError as exc:
        print(f"torchboost demo: error: {exc}", file=sys.stderr)
        return 2
    facts = observed.facts
    if facts is None or not facts.steps:
        print(f"torchboost demo: the workload did not train (exit status {observed.exit_code}):\n"
              f"{observed.stderr_tail}", file=sys.stderr)
        return 1
    findings = diagnose(facts)
    print_doctor_report(facts, findings, console, write_doctor_report(facts, findings, out / "doctor"))

    console.rule("2. tune: each technique measured, kept only if faster and still correct")
    options = TuneOptions(out_dir=out / "tune", config_path=out / "torchboost.toml", budget_s=args.budget,
                          run_steps=DEMO_RUN_STEPS, steps_per_trial=args.steps_per_trial, warmup=args.warmup)
    # --budget covers the process's start, the doctor, the search and the end-to-end check.
    tuned = tune_with_progress(command, options, console, facts=facts, spent_s=process_age_s())
    if tuned.outcome.error is not None:
        print(f"torchboost demo: {tuned.outcome.error}", file=sys.stderr)
        return 1
    console.rule("3. before / after")
    print_outcome(tuned, options, console)
    written = tuned.unverified.path if tuned.unverified is not None else options.config_path  # said unverified above
    if tuned.unverified is None and not tuned.written:
        console.print("\nNothing to apply: no change was proven faster here; the workload runs as it is.",
                      highlight=False)
        return 0
    console.print(f"\nApply it to the unmodified script: {apply_hint(written, command)}", highlight=False)
    return 0


def apply_hint(config: Path, command: list[str]) -> str:
    """The ``torchboost run`` line for the tuned file: the very command it was tuned for
    (``--size tiny --steps 400`` included), so ``run`` finds no other command to warn of."""
    words = ["python" if word == sys.executable else word for word in command]
    return f"torchboost run --config {shlex.quote(str(config))} -- {shlex.join(words)}"
