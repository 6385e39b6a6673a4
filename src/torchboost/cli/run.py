"""Run an unmodified training script with torchboost.toml applied.

``torchboost run [--config FILE] -- python train.py ARGS`` runs the script in
this process, as ``python train.py ARGS`` would, with the configuration's concrete
settings applied from outside by the same code that applies a tuning trial's candidate
(:mod:`torchboost.nocode`). The configuration is ``torchboost.toml`` or a
``pyproject.toml``'s ``[tool.torchboost]``, whichever the folder has (both is an error
naming both). Nothing is observed or recorded: the script runs at full speed, to its own
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
import gc
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from torchboost import env as _env
from torchboost import handover
from torchboost.config import CONFIG_FILENAME, PYPROJECT_FILENAME, BoostConfig, ConfigError, Overlay
from torchboost.config_files import config_words, find_config
from torchboost.handover import TRIAL_SETTINGS_ENV, write_trial_config
from torchboost.nocode import Applier, settings_from_config
from torchboost.process.launch import Launch, parse_launch
from torchboost.process.process_group import Interrupted, descendants, end_tree
from torchboost.process.target import Terminated, exit_status, print_user_traceback, run_target, terminated_by
from torchboost.process.tree_spec import TREE_ENV, TreeSpec, tree_env
from torchboost.techniques.compile.compile_cache import CACHE_ENV, compile_cache_env
from torchboost.tune.config_file import TunedFor, tuned_for
from torchboost.usage import UsageError

__all__ = ["add_arguments", "run", "run_applied", "run_job"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``torchboost run``."""
    parser.add_argument("--config", default=None,
                        help="configuration to apply: a torchboost.toml, or a pyproject.toml's [tool.torchboost] "
                             "(default: whichever of the two this folder has)")


def _config_path(name: str | None) -> Path:
    """The file to apply: ``--config``, else the folder's (UsageError when there is none)."""
    if name is None:
        found = find_config()
        if found is None:
            raise UsageError(f"no {CONFIG_FILENAME} here, nor [tool.torchboost] in {PYPROJECT_FILENAME}; "
                             "write one with 'torchboost tune -- python train.py'")
        return found
    if not Path(name).is_file():
        raise UsageError(f"{name}: no such file; write one with 'torchboost tune -- python train.py'")
    return Path(name)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``torchboost run``; returns the script's exit status."""
    try:
        launch = parse_launch(args.command)
        args.config = str(_config_path(args.config))
        config = BoostConfig.from_toml(args.config)
    except (UsageError, ConfigError) as exc:
        print(f"torchboost run: error: {exc}", file=sys.stderr)
        return 2
    if _env.rank() == 0:
        _check_tuned_for(Path(args.config), args.command)
    _guarded_by_tune()
    cache = compile_cache_env()
    os.environ.update(cache)  # the compile cache tune filled (the user's own folder when set)
    if launch.distributed:
        return run_job(launch, Path(args.config).resolve())
    if launch.tree is not None:
        return run_tree(launch, config)
    settings, notes = settings_from_config(config, BoostConfig.written_keys(args.config))
    if _env.rank() == 0:  # under torchrun, rank 0 speaks for the job
        for note in notes:
            print(f"torchboost run: {note}", file=sys.stderr)
        applied = ", ".join(f"{k}={v}" for k, v in sorted(settings.items())) or "nothing to apply"
        print(f"torchboost run: applying {config_words(args.config)}: {applied}", file=sys.stderr)
        if cache:
            print(f"torchboost run: compile cache: {cache[CACHE_ENV]}", file=sys.stderr)
        _note_booster_reads(Path(args.config))
    return run_applied(settings, launch.target)


def _note_booster_reads(config: Path) -> None:
    """One line when a Booster in the script would read another file than ``config``."""
    try:
        own = find_config()
    except ConfigError:  # both files here: the Booster will say so itself
        own = None
    if own is None or own.resolve() != config.resolve():
        print(f"torchboost run: note: a script that prepares a Booster reads ./{CONFIG_FILENAME} (or "
              f"[tool.torchboost] in ./{PYPROJECT_FILENAME}) itself, not {config_words(config)}", file=sys.stderr)


def _guarded_by_tune() -> None:
    """In tune's end-to-end check this process runs the script itself (``python train.py``):
    its writes go under the check's write guard, as the baseline's do. The start-up hook
    leaves torchboost's own process to this, once its modules are loaded."""
    spec_path = os.environ.get(TREE_ENV)
    if spec_path:
        from torchboost.process.tree_start import start

        start(spec_path)


def _check_tuned_for(config: Path, command: list[str]) -> None:
    """One line when ``config`` was tuned for another version of the script, or another command."""
    then = tuned_for(config)
    if then is None:  # the user's own file, or an older torchboost's: nothing to check against
        return
    now = TunedFor.of(command)
    differs = then.differences(now)
    if differs:
        what = f"another version of {then.script or now.script}" if then.script_sha256 != now.script_sha256 \
            else "another command"
        print(f"torchboost run: {config} was tuned for {what} ({'; '.join(differs)}): its figures may not hold; "
              "re-run torchboost tune", file=sys.stderr)


def run_job(launch: Launch, config: Path) -> int:
    """A torchrun job: torchrun starts every rank, and each runs ``torchboost run`` on the
    script in its own process, so the settings apply on every rank. Returns torchrun's
    exit status. SIGINT, SIGTERM and SIGHUP to this process are passed on to torchrun,
    which ends the ranks (each ends its own tree, as :func:`run_applied`); anything left
    is ended, and :class:`Interrupted` is raised: the command exits with 128 + N."""
    return _passing_signals(subprocess.Popen(launch.argv("torchboost.cli", "run", "--config", str(config))))


def run_tree(launch: Launch, config: BoostConfig) -> int:
    """Any other command (``bash train.sh``, ``accelerate launch train.py``): it runs as
    typed, and every Python process it starts applies the configuration once it imports
    torch, through the start-up hook that reaches every Python process of the command
    (:mod:`torchboost.process.tree_spec`) and the settings hand-over
    (:mod:`torchboost.handover`). Signals are passed on as for a torchrun job."""
    with tempfile.TemporaryDirectory(prefix="torchboost-run-") as tmp:
        settings = Path(tmp) / "settings.json"
        write_trial_config(settings, config)
        env = {**os.environ, TRIAL_SETTINGS_ENV: str(settings)}
        if TREE_ENV not in env:  # else tune's end-to-end check already put its guard there
            spec = Path(tmp) / "spec.json"
            TreeSpec().write(spec)
            env.update(tree_env(spec))
        return _passing_signals(subprocess.Popen(list(launch.tree or ()), env=env))


def _passing_signals(proc: subprocess.Popen) -> int:
    """Wait for ``proc``, passing SIGINT, SIGTERM and SIGHUP on to it; after one, what is
    left is ended and :class:`Interrupted` raised."""
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        proc.send_signal(signum)

    forwarded = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        status = proc.wait()
    finally:
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
    if received:
        raise _stopped(received[0])
    return status


def run_applied(settings: Overlay, target: list[str]) -> int:
    """Apply ``settings``, then run the target here, in this process, as ``__main__``.

    In-process, not in a child: the script shares this interpreter and its one import of
    torch, so running it under ``torchboost run`` costs about what importing torchboost
    does, and a signal sent to this process reaches the script itself (no process is left
    behind). Returns the script's exit status, as python would give it.
    """
    entry = sys.argv[0]  # the console script, whose frames are ours in a traceback
    applier = Applier(settings, claims=handover.process_claims()).install()
    try:
        with terminated_by(signal.SIGTERM, signal.SIGHUP):
            run_target(target)
    except SystemExit as exc:
        return exit_status(exc.code)
    except (KeyboardInterrupt, Terminated) as exc:
        # The script's finally blocks have run; its frames (and the loaders they hold) go.
        traceback.clear_frames(exc.__traceback__)
        raise _stopped(exc.signum if isinstance(exc, Terminated) else signal.SIGINT) from None
    except BaseException as exc:  # noqa: BLE001 - the user's crash, reported as Python would
        print_user_traceback(exc, entry)
        return 1
    finally:
        applier.uninstall()
        if applier.effect and _env.rank() == 0:
            print(f"torchboost run: applied, as at {applier.effect_at}: {'; '.join(applier.effect)}", file=sys.stderr)
    return 0


def _stopped(signum: int) -> Interrupted:
    """End every process left below this one (loader workers, persistent ones too, and
    what they started); the stop to raise, for the command's "stopped by" line."""
    gc.collect()  # a loader no longer referenced shuts its workers down itself
    # torch's SIGCHLD handler would raise in the middle of this for a worker ended here
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    stop = Interrupted(signum)
    stop.survivors = end_tree(descendants(os.getpid()))
    return stop
