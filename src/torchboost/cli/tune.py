"""Tune a training script step by step; keep only what is faster and still correct.

``torchboost tune [--out DIR] [--budget SECONDS] [--run-steps N] [--steps-per-trial N]
[--memory-limit SIZE] [--resume] [--json] -- python train.py ARGS``: runs the doctor on the
script, then short trials of it in child processes, one candidate configuration each, and
writes the winner to ``torchboost.toml`` (or where the configuration lives) with a report
in DIR. ``--json`` prints report.json to stdout; the tables go to stderr either way.

Exit status (:data:`EPILOG`): 0 a change kept and written; 3 no proven win (the
configuration is left as it was); 1 the script failed; 2 bad usage; 128 + N stopped by
signal N.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from torchboost import out_folder
from torchboost.config import ConfigError, Overlay
from torchboost.config_files import config_to_write
from torchboost.cli._lock import folder_lock
from torchboost.cli._inputs import check_out_dir, check_seconds, check_writable_file, parse_size
from torchboost.process.launch import UsageError, parse_launch
from torchboost.report.tune_report import print_tune_report, write_tune_report
from torchboost.tune.search.memory_limit import MEMORY_MARGIN
from torchboost.tune.trials.trial_length import (MIN_SLOW_TRIAL_STEPS, MIN_SLOWEST_TRIAL_STEPS, MIN_TRIAL_STEPS,
                                                 SLOW_STEP_MS, SLOWEST_STEP_MS, TRIAL_WINDOW_S)
from torchboost.tune.budget import process_age_s
from torchboost.tune.tuner import TuneOptions, TuneRun, tune_script, user_config
from torchboost.tune.search import Decision
from torchboost.tune.report_data import tune_summary
from torchboost.tune.trials.trial_result import TrialResult, describe_settings
from torchboost.cli._console import console as make_console

__all__ = ["EPILOG", "NO_PROVEN_WIN", "UNVERIFIED", "add_arguments", "exit_status", "run", "add_tune_options", "options_from_args"]

NO_PROVEN_WIN = 3
"""The exit status of a tune that ran and proved no change faster: nothing new is written."""
UNVERIFIED = 4
"""The exit status of a tune whose pick was measured faster but the end-to-end check could
not finish in --budget, or measured it under a load that moved: it is in
torchboost.unverified.toml, torchboost.toml is as it was."""

EPILOG = f"""exit status:
  0    a change was kept and written (the report says how it was verified)
  {NO_PROVEN_WIN}    no proven win: the configuration is left as it was
  {UNVERIFIED}    measured faster, not verified end to end within --budget (or under a
       machine's load that moved): written to torchboost.unverified.toml with the
       commands that verify it (tune --resume with a larger --budget, or torchboost
       compare)
  1    the script failed (its own traceback is shown)
  2    bad usage
  128+N  stopped by signal N (130: Ctrl-C)"""
"""``torchboost tune --help``'s closing lines: what each exit status means."""


def _steps_or_auto(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'auto', got {text!r}") from None


def add_tune_options(parser: argparse.ArgumentParser, *, out_default: str) -> None:
    """The options ``tune`` and ``demo`` share."""
    parser.add_argument("--out", default=out_default, help=f"report folder: a new or empty folder, or one torchboost "
                                                           f"made (default {out_default}); a folder of your files is refused")
    parser.add_argument("--budget", type=float, default=600.0, metavar="SECONDS",
                        help="stop starting trials after this long, keeping the best so far (default 600)")
    parser.add_argument("--run-steps", type=int, default=None, metavar="N",
                        help="steps the real run will take, to amortise compile time (default: what "
                             "the script says: a Trainer's max_steps, --max_iters/--epochs typed or its "
                             "defaults, a config's max_iters; else one epoch of its DataLoader)")
    parser.add_argument("--steps-per-trial", type=_steps_or_auto, default=None, metavar="N|auto",
                        help="measured steps per trial, after warm-up (default auto: about "
                             f"{TRIAL_WINDOW_S:g} s of the script's steps, at least {MIN_TRIAL_STEPS}, or "
                             f"{MIN_SLOW_TRIAL_STEPS} for steps of {SLOW_STEP_MS / 1e3:g} s or more that wait for no data, "
                             f"{MIN_SLOWEST_TRIAL_STEPS} for such steps of {SLOWEST_STEP_MS / 1e3:g} s or more)")
    parser.add_argument("--memory-limit", default=None, metavar="SIZE",
                        help="reject any change whose peak memory (the CUDA allocator's peak on a GPU, the training "
                             "process's peak RSS otherwise) is over SIZE, and try the memory levers when the script "
                             "itself is over it: 12GiB, 800MB, 2048M or a number of bytes (K, M, G, KiB, MiB, GiB: "
                             f"powers of 1024; KB, MB, GB: of 1000). Default: {MEMORY_MARGIN * 100:.0f}%% of the GPU's "
                             f"memory on CUDA, {MEMORY_MARGIN * 100:.0f}%% of the RAM on a CPU")
    parser.add_argument("--warmup", type=int, default=5, metavar="N", help="warm-up steps per trial (default 5)")
    parser.add_argument("--resume", action="store_true", help="reuse the finished trials in DIR/journal.jsonl")
    parser.add_argument("--stall-timeout", type=float, default=60.0, metavar="SECONDS",
                        help="end a run with no training step for this long (or 20 median steps, when longer) "
                             "as stalled (default 60)")
    parser.add_argument("--verify-pairs", type=int, default=4, metavar="N",
                        help="after the search, run the baseline and the tuned configuration N times each, in turn, "
                             "end to end as you will run them (the whole script when 2N runs fit in the check's time, "
                             "three quarters of the budget, "
                             "else the same number of steps each); the tuned file is kept only when these say it is "
                             "faster; a claim rests on 4 pairs or more. More pairs: a surer verdict, a longer tune (default 4; 0 skips it)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``torchboost tune``."""
    add_tune_options(parser, out_default="torchboost-tune")
    parser.add_argument("--json", action="store_true", help="print report.json to stdout (the tables go to stderr)")
    parser.add_argument("--config", default=None,
                        help="the configuration to start from, when it exists, and where to write the winner "
                             "(default: where this folder's configuration lives, torchboost.toml or [tool.torchboost] "
                             "in pyproject.toml, else torchboost.toml; your own previous file is kept as FILE.bak)")


def options_from_args(args: argparse.Namespace, *, config: str) -> TuneOptions:
    """TuneOptions from parsed arguments; raises UsageError for values out of range."""
    check_seconds(args.budget, "--budget")
    check_seconds(args.stall_timeout, "--stall-timeout")
    # A bad size is said before the report folder is made.
    memory_limit = parse_size(args.memory_limit, "--memory-limit") if args.memory_limit is not None else None
    out_folder.check(args.out)  # made by run() once every input was checked
    if args.steps_per_trial is not None and args.steps_per_trial < 3:
        raise UsageError(f"--steps-per-trial must be at least 3, got {args.steps_per_trial}")
    if args.warmup < 1:
        raise UsageError(f"--warmup must be at least 1, got {args.warmup}")
    if args.run_steps is not None and args.run_steps < 1:
        raise UsageError(f"--run-steps must be at least 1, got {args.run_steps}")
    if args.verify_pairs < 0:
        raise UsageError(f"--verify-pairs must be 0 or more, got {args.verify_pairs}")
    return TuneOptions(out_dir=Path(args.out), config_path=Path(config), budget_s=args.budget,
                       run_steps=args.run_steps, steps_per_trial=args.steps_per_trial,
                       warmup=args.warmup, resume=args.resume, verify_pairs=args.verify_pairs,
                       stall_timeout_s=args.stall_timeout, memory_limit_bytes=memory_limit)


def tune_with_progress(command: list[str], options: TuneOptions, console: Console,
                       facts: Any = None, spent_s: float = 0.0) -> TuneRun:
    """Run tune_script with a live progress bar and one line per decision; ``spent_s``: the
    seconds already spent (the process's start, the doctor run of ``facts``), counted in the budget."""
    with Progress(TextColumn("[bold]tune[/]"), BarColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("diagnosing the baseline", total=options.budget_s)
        started = progress.get_time()

        def on_trial(settings: Overlay, repeat: int, result: TrialResult | None) -> None:
            progress.update(task, completed=min(progress.get_time() - started, options.budget_s))
            if result is None:
                progress.update(task, description=f"trial: {describe_settings(settings)} (#{repeat + 1})")

        def on_decision(decision: Decision) -> None:
            mark = {"kept": "[green]kept[/]", "incorrect": "[red]incorrect[/]", "failed": "[red]failed[/]",
                    "over_memory": "[red]over_memory[/]"}
            status = mark.get(decision.status, f"[yellow]{decision.status}[/]")
            progress.console.print(f"  {status} {describe_settings(decision.settings)}: {decision.reason}",
                                   highlight=False)

        def on_verify(name: str, pair: int) -> None:
            progress.update(task, description=f"end to end: {name} run, pair {pair + 1} of {options.verify_pairs}")

        return tune_script(command, options, on_trial=on_trial, on_decision=on_decision, on_verify=on_verify,
                           facts=facts, spent_s=spent_s)


def print_outcome(run: TuneRun, options: TuneOptions, console: Console) -> dict[str, Any]:
    """The final table: waterfall, then where the files are; the report's summary."""
    summary = tune_summary(run, config_path=options.config_path)
    paths = write_tune_report(summary, options.out_dir)
    print_tune_report(summary, console, paths)
    return {**summary, "paths": paths}


def exit_status(summary: dict[str, Any]) -> int:
    """tune's exit status for its report's summary (:data:`EPILOG`)."""
    return {"tuned": 0, "unchanged": NO_PROVEN_WIN, "unverified": UNVERIFIED}.get(summary["status"], 1)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``torchboost tune``."""
    console = make_console(stderr=True)
    lock = contextlib.ExitStack()
    try:
        parse_launch(args.command)
        options = options_from_args(args, config=args.config or str(config_to_write()))
        user_config(options.config_path)  # a bad file is said now, not after the search
        check_writable_file(options.config_path)  # nor one tune could not write at the end
        check_out_dir(options.out_dir)  # the folder is made last: a refused tune leaves none behind
        lock.enter_context(folder_lock(options.out_dir))  # nor a second tune in the same folder
    except (UsageError, ConfigError) as exc:
        print(f"torchboost tune: error: {exc}", file=sys.stderr)
        return 2
    with lock, out_folder.in_use(options.out_dir):
        return _tune(args.command, options, console, as_json=args.json)


def _tune(command: list[str], options: TuneOptions, console: Console, *, as_json: bool = False) -> int:
    """Tune and print the outcome; the exit status (:data:`EPILOG`)."""
    tuned = tune_with_progress(command, options, console, spent_s=process_age_s())  # --budget counts from our start
    if tuned.outcome.error is not None:
        if tuned.outcome.baseline.traceback:  # the script's own words first, verbatim, as python shows them
            sys.stderr.write(tuned.outcome.baseline.traceback + "\n")
        console.print(f"[red]torchboost tune:[/] {tuned.outcome.error}", highlight=False)
        return 1
    summary = print_outcome(tuned, options, console)
    if as_json:
        sys.stdout.write(Path(summary["paths"]["json"]).read_text(encoding="utf-8"))
    return exit_status(summary)
