"""Compare two ways of running a training script: which is faster end to end, and do they train alike.

``torchboost compare [options] -- python a.py ARGS -- python b.py ARGS`` (two commands), or
``torchboost compare --config a.toml --config b.toml [options] -- python train.py ARGS`` (one
command, two configurations applied through ``torchboost run``; ``--config none`` is the
command as is). Both sides run in alternating pairs of whole processes, under the write
guard, more pairs while the verdict is open and ``--budget`` allows; then a short observed
run of each for its losses (:mod:`torchboost.tune.verify.versus`). It prints the times, the
ratio with its interval and the verdict ("no proven win" when the interval does not clear
``--min-gain`` either way), and the loss-parity verdict tune uses; ``--json`` prints JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from torchboost import out_folder
from torchboost.cli._inputs import check_out_dir
from torchboost.process.launch import UsageError, parse_launch
from torchboost.tune.verify.versus import Side, compare

__all__ = ["USAGE", "add_arguments", "fraction", "run", "sides"]

USAGE = ("torchboost compare [options] -- python a.py ARGS -- python b.py ARGS\n"
         "       torchboost compare --config A.toml --config B.toml [options] -- python train.py ARGS")
"""The two ways to call it, for ``--help``: two commands, or one command and two files."""


def fraction(text: str) -> float:
    """A least gain: a fraction below 1 (``0.03``) or a percentage (``3%``); ``3`` is refused
    rather than read as 300%."""
    words = text.strip()
    try:
        value = float(words[:-1]) / 100 if words.endswith("%") else float(words)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction (0.03) or a percentage (3%), got {text!r}") from None
    if not 0 <= value < 1 or not math.isfinite(value):
        hint = f"; for {value:g}% write {value / 100:g} or {value:g}%" if 1 <= value < 100 else ""
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to below 1 (0.03) or a percentage (3%), got "
                                         f"{text!r}, which is {value:.0%}{hint}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``torchboost compare``."""
    parser.add_argument("--config", action="append", default=[], metavar="TOML",
                        help="a side's configuration, twice for one command ('none': the command as is)")
    parser.add_argument("--pairs", type=int, default=4, help="alternating pairs of whole runs (default 4)")
    parser.add_argument("--budget", type=float, default=1800.0, metavar="SECONDS",
                        help="seconds the pairs may take, extra pairs included (default 1800)")
    parser.add_argument("--loss-steps", type=int, default=30, metavar="N",
                        help="observed steps of each side whose losses are compared (0: none; default 30)")
    parser.add_argument("--min-gain", type=fraction, default=0.03, metavar="FRACTION",
                        help="least gain a win must clear: a fraction (0.03) or a percentage (3%%) (default 0.03)")
    parser.add_argument("--out", default="torchboost-compare", help="folder for what the runs wrote")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def sides(command: list[str], configs: list[str]) -> tuple[Side, Side]:
    """The two sides from the words after ``--`` and the ``--config`` options; UsageError when
    they do not make two."""
    if configs:
        if len(configs) != 2:
            raise UsageError(f"--config: give it twice (A and B), got {len(configs)}")
        if not command or "--" in command:
            raise UsageError("with --config, give one command after '--': torchboost compare --config a.toml "
                             "--config b.toml -- python train.py")
        found = [None if c.lower() == "none" else Path(c) for c in configs]
        for path in found:
            if path is not None and not path.is_file():
                raise UsageError(f"--config {path}: no such file")
        return (Side("A", command, found[0]), Side("B", command, found[1]))
    if "--" not in command:
        raise UsageError("give two commands: torchboost compare -- python a.py -- python b.py "
                         "(or one command and --config twice)")
    cut = command.index("--")
    first, second = command[:cut], command[cut + 1:]
    if not first or not second:
        raise UsageError("a side has no command: torchboost compare -- python a.py -- python b.py")
    return Side("A", first), Side("B", second)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``torchboost compare``; 0 when both sides ran, 1 when one failed, 2 on bad usage."""
    try:
        a, b = sides(list(args.command), list(args.config))
        for side in (a, b):
            parse_launch(side.command)
        if args.pairs < 1 or args.loss_steps < 0 or not math.isfinite(args.budget) or args.budget <= 0:
            raise UsageError("--pairs must be 1 or more, --loss-steps 0 or more, --budget a positive number")
        check_out_dir(args.out)
    except UsageError as exc:
        print(f"torchboost compare: error: {exc}", file=sys.stderr)
        return 2
    for side in (a, b):
        print(f"{side.label}: {side.words()}", file=sys.stderr)

    def said(label: str, pair: int) -> None:
        print(f"  pair {pair + 1}: {label}", file=sys.stderr)

    with out_folder.in_use(args.out):
        result = compare(a, b, pairs=args.pairs, budget_s=args.budget, out_dir=Path(args.out),
                         loss_steps=args.loss_steps, min_gain=args.min_gain, on_run=said)
    if args.json:
        print(json.dumps(result.to_dict(args.min_gain), indent=1, default=str))
    else:
        runs = result.runs
        for label, times in ((a.label, runs.baseline_runs_s), (b.label, runs.tuned_runs_s)):
            print(f"{label}: {', '.join(f'{t:.1f}' for t in times)} s")
        print(result.verdict(args.min_gain))
        if result.parity:
            print(f"losses: {b.label} keeps {result.parity}" if result.parity_ok else f"losses: {result.parity}")
    return 1 if result.runs.error is not None else 0
