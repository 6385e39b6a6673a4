"""The ``torchboost`` command line: one sub-command per moment of use.

Each sub-command lives in its own module of this package exposing
``add_arguments(parser)`` and ``run(args) -> int``; this file only wires them up. Bad usage exits 2 with one line
on stderr and no traceback; so does a sub-command that runs a script, on a system without
POSIX process groups (Windows), before anything of it is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import re
import signal
import sys
import textwrap
from typing import Sequence

from torchboost import __version__
from torchboost._disk import NO_SPACE, NoSpaceError, no_space_words
from torchboost.env import posix_processes
from torchboost.cli._console import line_ends_tracked

__all__ = ["main", "platform_refusal", "split_command", "summary"]

_SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("torchboost.cli.demo", "diagnose and tune a built-in workload, then show the before/after"),
    "doctor": ("torchboost.cli.doctor", "diagnose an unmodified training script"),
    "tune": ("torchboost.cli.tune", "measure techniques one by one on your script; write torchboost.toml"),
    "run": ("torchboost.cli.run", "run an unmodified script with torchboost.toml applied"),
    "compare": ("torchboost.cli.compare", "two commands, or two torchboost.toml files on one command: which is "
                "faster end to end, and do they train alike"),
    "probe": ("torchboost.cli.probe", "measure this machine's matmul peak and memory bandwidth (cached)"),
    "export": ("torchboost.cli.export", "print torchboost.toml as Lightning Trainer arguments, an accelerate config "
               "or TrainingArguments keywords"),
}


_TAKES_COMMAND = ("doctor", "tune", "run", "compare")
_COMMAND_WORD = re.compile(r"(^|\s)(python[\d.]*|torchrun|\S+\.py)(\s|$)")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith("unrecognized arguments") and _COMMAND_WORD.search(message):
            prog = getattr(self, "command_prog", self.prog)
            message += f"; put '--' before your command: {prog} -- python train.py ARGS"
        self.exit(2, f"{self.prog}: error: {message}\n")


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split ``[opts..., "--", cmd...]`` into our options and the user's command."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _build_parser(chosen: str | None) -> argparse.ArgumentParser:
    # Only the chosen sub-command's module is imported: `torchboost run` must cost no more
    # than the script itself, so it does not load the tuner's and reports' modules.
    parser = _Parser(prog="torchboost", description="Make PyTorch training markedly faster, and prove it.")
    parser.command_prog = f"torchboost {chosen}" if chosen else "torchboost doctor"  # type: ignore[attr-defined]
    parser.add_argument("--version", action="version", version=f"torchboost {__version__}")
    sub = parser.add_subparsers(dest="subcommand", metavar="COMMAND", parser_class=_Parser)
    for name, (module_name, help_text) in _SUBCOMMANDS.items():
        if name != chosen:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        usage = f"torchboost {name} [options] -- python train.py ARGS" if name in _TAKES_COMMAND else None
        # RawDescription: the summary comes wrapped, and an epilog's table keeps its lines
        module.add_arguments(sub.add_parser(name, help=help_text, description=summary(module.__doc__ or ""),
                                            usage=getattr(module, "USAGE", usage), epilog=getattr(module, "EPILOG", None),
                                            formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def summary(docstring: str) -> str:
    """A sub-command's ``--help`` description: its docstring's first paragraph, whole (a
    sentence wrapped over two lines is not cut at the first)."""
    return textwrap.fill(" ".join(docstring.strip().split("\n\n")[0].split()), width=79)


def _what_was_ended(exc: BaseException) -> str:
    """The stop message's second half: what was ended, and what lives on outside the group."""
    left = getattr(exc, "survivors", None)
    if not left:
        return "the script and its processes were ended"
    return (f"the script and its process group were ended; still running, detached from it (setsid): "
            f"{', '.join(left)}")


_NEEDS_POSIX = ("demo", "doctor", "tune", "run", "compare")
"""The sub-commands that start and supervise the user's script (process groups, signals)."""


def platform_refusal(chosen: str | None) -> str | None:
    """The one line for a sub-command that cannot run on this system (Windows: no POSIX
    process groups or signals), before its module is imported; None where it can."""
    if chosen not in _NEEDS_POSIX or posix_processes():
        return None
    return (f"torchboost {chosen}: error: '{chosen}' needs POSIX process groups and signals (Linux or macOS) to "
            f"supervise your script, and {sys.platform} has none; run it under WSL, or put torchboost.Booster in "
            "your own loop, which works here")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``torchboost`` console script; returns the exit code."""
    own, command = split_command(sys.argv[1:] if argv is None else argv)
    chosen = next((word for word in own if word in _SUBCOMMANDS), None)
    refusal = platform_refusal(chosen)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return 2
    parser = _build_parser(chosen)
    args = parser.parse_args(own)
    if args.subcommand is None:
        parser.print_help()
        return 2
    args.command = command
    module = importlib.import_module(_SUBCOMMANDS[args.subcommand][0])
    # A script's relayed output is watched for a progress bar left mid-line; under
    # ``run`` the script is this process and keeps its own streams.
    watched = line_ends_tracked() if args.subcommand != "run" else contextlib.nullcontext()
    try:
        with watched:
            return int(module.run(args) or 0)
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        # A full disk under --out (or torchboost.toml's folder): one line, not a traceback.
        words = str(exc) if isinstance(exc, NoSpaceError) else no_space_words(exc.filename or ".")
        print(f"torchboost {args.subcommand}: error: {words}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        # Ctrl-C, or SIGTERM/SIGHUP passed on to the script's process group by the
        # observer: the exit status a shell gives a process killed by that signal.
        signum = int(getattr(exc, "signum", signal.SIGINT))
        name = (exc.args[0] if exc.args else "") or signal.Signals(signum).name  # a bare Ctrl-C has no args
        print(f"torchboost {args.subcommand}: stopped by {name}; {_what_was_ended(exc)}", file=sys.stderr)
        return 128 + signum
