"""Run an unmodified training script with torchboost.toml applied.

``torchboost run [--config FILE] -- python train.py ARGS`` runs the script in
this process, as ``python train.py ARGS`` would, with the configuration's concrete
settings applied from outside by the same code that applies a tuning trial's candidate
(:mod:`torchboost.nocode`). The configuration is ``torchboost.toml`` or a
``pyproject.toml``'s ``[tool.torchboost]``, whichever the folder has (both is an error
naming both); it is read once (:class:`~torchboost.config_files.ConfigFile`) and resolved
once into a :class:`~torchboost.plan.Plan`, which the applier is given whole. Nothing is observed or recorded: the script runs at full speed, to its own
end, and ``torchboost run`` exits with the script's exit status.

A script that prepares a :class:`torchboost.Booster` reads ``torchboost.toml`` itself;
for it the model and optimizer settings stand down here, so nothing is applied twice (the
Booster claims them in the process's :class:`~torchboost.handover.Claims`, which is given
to the applier).

SIGTERM and SIGHUP, as under the doctor, raise :class:`~torchboost.process.target.Terminated`
where the script is, so its ``finally`` blocks run; then every process it started
(loader workers, persistent ones too) is ended, and ``torchboost run`` says "stopped by
SIGTERM" and exits with 128 + the signal's number (Ctrl-C likewise, 130).

A file tune wrote records what it was tuned for (:class:`~torchboost.tune.config_file.TunedFor`):
run on another version of the script, or another command, says so in one line and runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

from torchboost import env as _env
from torchboost import handover
from torchboost.config import CONFIG_FILENAME, PYPROJECT_FILENAME, ConfigError
from torchboost.config_files import ConfigFile, config_to_apply, find_config
from torchboost.nocode import Applier
from torchboost.plan import Plan
from torchboost.process.launch import parse_launch
from torchboost.process.as_typed import run_as_typed
from torchboost.process.process_group import ended_below
from torchboost.process.target import Terminated, exit_status, print_user_traceback, run_target, terminated_by
from torchboost.process.tree_spec import TREE_ENV
from torchboost.techniques.compile.compile_cache import CACHE_ENV, compile_cache_env
from torchboost.tune.config_file import tuned_elsewhere
from torchboost.usage import UsageError

__all__ = ["add_arguments", "run", "run_applied"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``torchboost run``."""
    parser.add_argument("--config", default=None,
                        help="configuration to apply: a torchboost.toml, or a pyproject.toml's [tool.torchboost] "
                             "(default: whichever of the two this folder has)")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``torchboost run``; returns the script's exit status."""
    try:
        launch = parse_launch(args.command)
        file = config_to_apply(args.config)
    except (UsageError, ConfigError) as exc:
        print(f"torchboost run: error: {exc}", file=sys.stderr)
        return 2
    # The command as typed is checked once, where it was typed: a torchrun rank's own
    # `torchboost run -- python train.py` is not the `torchrun ... train.py` tune recorded.
    what = tuned_elsewhere(file.header, args.command) if not _env.is_torchrun_rank() else None
    if what is not None:  # a tune's record of another script, or command
        print(f"torchboost run: {file.path} was tuned for {what}: its figures may not hold; re-run torchboost tune",
              file=sys.stderr)
    _guarded_by_tune()
    cache = compile_cache_env()
    os.environ.update(cache)  # the compile cache tune filled (the user's own folder when set)
    if launch.distributed:  # each rank runs torchboost run on the script (ending its own tree as run_applied does)
        ranks = launch.argv("torchboost.cli", "run", "--config", str(file.path.resolve()))
        return run_as_typed(ranks)
    plan = Plan.of(file.config, file.written)
    if launch.tree is not None:
        return run_as_typed(launch.tree, plan)
    if _env.rank() == 0:  # under torchrun, rank 0 speaks for the job
        _say_plan(plan, file, cache, named=args.config is not None)
    return run_applied(plan, launch.target)


def _say_plan(plan: Plan, file: ConfigFile, cache: dict[str, str], *, named: bool) -> None:
    """What will be applied, what is left alone and why, the compile cache; and, for a file
    named with ``--config``, when a Booster in the script would read another."""
    for note in plan.notes:
        print(f"torchboost run: {note}", file=sys.stderr)
    applied = ", ".join(f"{k}={v}" for k, v in sorted(plan.apply.items())) or "nothing to apply"
    print(f"torchboost run: applying {file.words}: {applied}", file=sys.stderr)
    if cache:
        print(f"torchboost run: compile cache: {cache[CACHE_ENV]}", file=sys.stderr)
    if named:  # else the file is the folder's own, the one a Booster reads
        _note_booster_reads(file)


def _note_booster_reads(file: ConfigFile) -> None:
    """One line when a Booster in the script would read another file than ``file``."""
    try:
        own = find_config()
    except ConfigError:  # both files here: the Booster will say so itself
        own = None
    if own is None or own.resolve() != file.path.resolve():
        print(f"torchboost run: note: a script that prepares a Booster reads ./{CONFIG_FILENAME} (or "
              f"[tool.torchboost] in ./{PYPROJECT_FILENAME}) itself, not {file.words}", file=sys.stderr)


def _guarded_by_tune() -> None:
    """In tune's end-to-end check this process runs the script itself (``python train.py``):
    its writes go under the check's write guard, as the baseline's do. The start-up hook
    leaves torchboost's own process to this, once its modules are loaded."""
    spec_path = os.environ.get(TREE_ENV)
    if spec_path:
        from torchboost.process.tree_start import start

        start(spec_path)


def run_applied(plan: Plan, target: list[str]) -> int:
    """Apply ``plan``'s settings, then run the target here, in this process, as ``__main__``.

    In-process, not in a child: the script shares this interpreter and its one import of
    torch, so running it under ``torchboost run`` costs about what importing torchboost
    does, and a signal sent to this process reaches the script itself (no process is left
    behind). Returns the script's exit status, as python would give it.
    """
    entry = sys.argv[0]  # the console script, whose frames are ours in a traceback
    applier = Applier(plan, claims=handover.process_claims()).install()
    try:
        with terminated_by(signal.SIGTERM, signal.SIGHUP):
            run_target(target)
    except SystemExit as exc:
        return exit_status(exc.code)
    except (KeyboardInterrupt, Terminated) as exc:
        # The script's finally blocks have run; its frames (and the loaders they hold) go.
        traceback.clear_frames(exc.__traceback__)
        raise ended_below(exc.signum if isinstance(exc, Terminated) else signal.SIGINT) from None
    except BaseException as exc:  # noqa: BLE001 - the user's crash, reported as Python would
        print_user_traceback(exc, entry)
        return 1
    finally:
        applier.uninstall()
        if applier.effect and _env.rank() == 0:
            print(f"torchboost run: applied, as at {applier.effect_at}: {'; '.join(applier.effect)}", file=sys.stderr)
    return 0
