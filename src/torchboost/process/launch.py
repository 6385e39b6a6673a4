"""The user's command, understood: one Python process, a ``torchrun`` job, or any other command.

``python train.py ARGS``, ``train.py ARGS`` and ``python -m pkg.mod ARGS`` run one
process. ``torchrun [OPTIONS] train.py ARGS`` and ``python -m torch.distributed.run
[OPTIONS] ...`` run a job: torchrun itself starts every rank (torchboost has no launcher
of its own), and each rank runs our entry module in place of the script, which then runs
the script, so every rank is observed or has the settings applied. torchrun's options
are read by torchrun's own parser, so whatever it accepts is understood here.

Any other command (``bash train.sh``, ``./train.sh``, ``make train``, ``accelerate launch
train.py``) is a *tree*: it runs as typed, and the Python processes it starts, however deep,
are reached by the start-up hook every Python process of the command loads
(:mod:`torchboost.process.tree_spec`); so are the processes a Python command starts
itself (ranks spawned with ``torch.multiprocessing``, a launcher's workers).
"""

from __future__ import annotations

import importlib.machinery
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from torchboost.usage import UsageError

__all__ = ["Launch", "UsageError", "parse_command", "parse_launch", "script_file", "without_interpreter"]

_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?(\.exe)?$")
_RUN_MODULES = ("torch.distributed.run",)
_MODULE_FLAGS = ("-m", "--module")


@dataclass(frozen=True)
class Launch:
    """How to start the user's command with a torchboost entry module in front of it."""

    target: list[str]
    """``[SCRIPT, ARGS...]`` or ``["-m", MODULE, ARGS...]``: what each process runs."""
    torchrun: tuple[str, ...] | None = None
    """torchrun's own options (``--nproc-per-node 2``...); None for one process."""
    tree: tuple[str, ...] | None = None
    """Any other command, as it will run (its first word found on the PATH); ``target`` is
    then the Python script it names, if any, for the journal's hash."""

    @property
    def distributed(self) -> bool:
        """The command is a torchrun job."""
        return self.torchrun is not None

    @property
    def script(self) -> Path | None:
        """The Python file the command runs (:func:`script_file`; None: a tree naming none)."""
        return script_file(self.target)

    def argv(self, module: str, *module_args: str) -> list[str]:
        """``python -m MODULE ARGS -- TARGET``, each rank's under torchrun for a job; a tree's
        command as it is (its processes are reached by the start-up hook, not by MODULE)."""
        if self.tree is not None:
            return list(self.tree)
        if self.torchrun is None:
            return [sys.executable, "-u", "-m", module, *module_args, "--", *self.target]
        return [sys.executable, "-m", "torch.distributed.run", *self.torchrun, "-m", module, *module_args,
                "--", *self.target]


def _is_python(word: str) -> bool:
    return bool(_PYTHON.match(os.path.basename(word))) or word == sys.executable


def parse_launch(command: Sequence[str]) -> Launch:
    """The :class:`Launch` for a user's command; raises :class:`UsageError` for one it cannot run."""
    words = list(command)
    if words and os.path.basename(words[0]) == "torchrun":
        return _torchrun(words[1:])
    if len(words) >= 3 and _is_python(words[0]) and words[1] == "-m" and words[2] in _RUN_MODULES:
        return _torchrun(words[3:])
    if words and not _is_python(words[0]) and not words[0].endswith(".py"):
        return _tree(words)
    return Launch(parse_command(words))


def _tree(words: list[str]) -> Launch:
    """Any command that is not ``python ...`` or torchrun: run as typed (see the module docstring)."""
    first = words[0]
    found = shutil.which(first) if os.sep not in first else (first if os.access(first, os.X_OK) else None)
    if found is None or os.path.isdir(found):
        if os.path.isfile(first):
            raise UsageError(f"{first} is not executable: run it through its interpreter "
                             f"(e.g. 'bash {first}'), or 'chmod +x {first}'")
        raise UsageError(f"command not found: {first} (not a file here, nor on the PATH)")
    scripts = [w for w in words[1:] if w.endswith(".py") and os.path.isfile(w)]
    return Launch(target=scripts[:1], tree=(found, *words[1:]))


def _torchrun(words: list[str]) -> Launch:
    from torch.distributed.run import get_args_parser  # only a job pays for importing it

    try:
        args = get_args_parser().parse_args(words)
    except SystemExit as exc:  # torchrun's parser printed its own message
        raise UsageError("torchrun could not parse these options; run 'torchrun --help'") from exc
    if args.no_python:
        raise UsageError("torchrun --no-python is not supported: torchboost needs each rank to run Python")
    rest = len(args.training_script_args)
    options = [w for w in words[: len(words) - rest - 1] if w not in _MODULE_FLAGS]
    script = words[len(words) - rest - 1]
    target = ["-m", script, *args.training_script_args] if args.module else [script, *args.training_script_args]
    if not args.module and not Path(script).is_file():
        raise UsageError(f"script not found: {script} (check the path, relative to {os.getcwd()})")
    return Launch(target, tuple(options))


def parse_command(command: Sequence[str]) -> list[str]:
    """The bootstrap target for a one-process command: ``[SCRIPT, ARGS...]`` or ``["-m", MODULE, ARGS...]``.

    Accepts ``python train.py ARGS``, ``train.py ARGS`` and ``python -m pkg.mod ARGS``;
    raises :class:`UsageError` otherwise.
    """
    words = list(command)
    if not words:
        raise UsageError("no command to observe; put it after '--', e.g. torchboost doctor -- python train.py")
    if _is_python(words[0]):
        words = words[1:]
    if not words:
        raise UsageError("no script after 'python'; e.g. torchboost doctor -- python train.py")
    if words[0] == "-m":
        if len(words) < 2:
            raise UsageError("no module after 'python -m'; e.g. torchboost doctor -- python -m pkg.train")
        return words
    if words[0].startswith("-"):
        raise UsageError(f"python option {words[0]!r} is not supported; run 'python SCRIPT' or 'python -m MODULE'")
    if not Path(words[0]).is_file():
        raise UsageError(f"script not found: {words[0]} (check the path, relative to {os.getcwd()})")
    return words


def without_interpreter(command: Sequence[str]) -> list[str]:
    """The command less a leading ``python`` (any version, or this interpreter's path):
    ``python3 train.py`` and ``python train.py`` run the same script."""
    words = list(command)
    return words[1:] if words and _is_python(words[0]) else words


def script_file(target: Sequence[str]) -> Path | None:
    """The file a target runs: the script, a directory's ``__main__.py``, or for ``-m`` the
    module's file, found on the path as ``python -m`` would search it, without importing
    the module or its packages. None when there is no such file."""
    if not target:
        return None
    if target[0] != "-m":
        path = Path(target[0])
        path = path / "__main__.py" if path.is_dir() else path
        return path if path.is_file() else None
    search: list[str] | None = [os.getcwd(), *sys.path[1:]]  # as run_target sets the path
    spec = None
    parts = target[1].split(".")
    for depth in range(1, len(parts) + 1):  # each package's folder, not its __init__, is read
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[:depth]), search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    if spec is not None and spec.submodule_search_locations:  # a package run with -m: its __main__
        spec = importlib.machinery.PathFinder.find_spec(f"{target[1]}.__main__", search)
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and os.path.isfile(origin) else None
