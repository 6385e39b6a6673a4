"""Child-process entry: install the observer, run the user's script as ``__main__``, write facts.

Usage (started by :func:`torchboost.observe.run_observed`, not by hand)::

    python -m torchboost.observe.child.bootstrap SPEC.json -- SCRIPT.py ARGS...
    python -m torchboost.observe.child.bootstrap SPEC.json -- -m PACKAGE.MODULE ARGS...

The script sees the ``sys.argv`` and ``sys.path[0]`` it would see if run directly. The
exit status is the script's own: 0 when the observer stopped it after enough steps or
it finished, its ``sys.exit`` code, or 1 after an uncaught exception (whose traceback
is printed to stderr as Python would).
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.machinery
import io
import os
import runpy
import signal
import sys
import traceback
import types
from typing import Sequence

from torchboost import env as _env
from torchboost._signals import raising_on
from torchboost import handover
from torchboost.evidence.observed import Facts
from torchboost.nocode import Applier, settings_from_config
from torchboost.observe.guard.guard_spec import WriteGuardSpec
from torchboost.observe.hooks.instrument import Instrumentation
from torchboost.observe.guard.write_guard import WriteGuard
from torchboost.observe.record.recorder import StepRecorder, StopObserving
from torchboost.observe.spec import ObserveSpec
from torchboost.observe.child.watchdog import StallWatchdog, die_with_parent

__all__ = ["Terminated", "main", "finish", "guard_of", "run_target", "exit_status", "print_user_traceback",
           "terminated_by"]

_USAGE = "usage: python -m torchboost.observe.child.bootstrap SPEC.json -- (SCRIPT | -m MODULE) [ARGS...]"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the target under observation; returns the exit status to leave with."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[1] != "--" or (argv[2] == "-m" and len(argv) < 4):
        print(_USAGE, file=sys.stderr)
        return 2
    # Under torchrun every rank runs this; each writes its own files.
    spec = ObserveSpec.read(argv[0]).for_rank(_env.rank())
    # One Claims for the process: a Booster in the script claims there what it applies;
    # the applier then stands down for it and the recorder reports that a Booster ran.
    claims = handover.process_claims()
    recorder = StepRecorder(spec, claims=claims)
    # Our parent: torchboost (from the spec: it may already be gone, and then getppid() is
    # init's), or under torchrun the agent that started this rank.
    parent = os.getppid() if _env.is_torchrun_rank() or spec.parent_pid is None else spec.parent_pid
    polls_parent = not die_with_parent(parent)
    watchdog = StallWatchdog(recorder, spec.stall_timeout_s or float("inf"),
                             parent_pid=parent if polls_parent else None).start()
    # A tuning trial's settings: what only a Booster can apply (fp16, accumulation) is
    # left to the Booster, which reads the same hand-over; the rest is applied from outside.
    trial = handover.trial_config()
    applicable, _ = settings_from_config(trial) if trial is not None else (None, [])
    applier = Applier(applicable, claims=claims).install() if applicable else None
    guard = guard_of(spec)
    instrumentation = Instrumentation(recorder).install()
    exit_code = 0
    signal.signal(signal.SIGTERM, _terminate)  # a stop passed on by torchboost: write the facts first
    try:
        run_target(argv[2:])
        recorder.run.ended = "finished"
    except StopObserving:
        recorder.run.ended = "stopped"
    except SystemExit as exc:
        exit_code = exit_status(exc.code)
        recorder.run.ended = "finished" if exit_code == 0 else "crashed"
    except (KeyboardInterrupt, Terminated) as exc:
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        recorder.run.ended, exit_code, recorder.run.signal = "killed", 128 + signum, signal.Signals(signum).name
    except BaseException as exc:  # noqa: BLE001 - the user's crash, reported as Python would
        print_user_traceback(exc)
        recorder.run.ended, exit_code = "crashed", 1
    finally:
        finish(recorder, watchdog, instrumentation, applier, exit_code)
        if guard is not None:
            guard.uninstall()
    return exit_code


def guard_of(spec: ObserveSpec) -> WriteGuard | None:
    """The write guard the spec asks for, installed (None: the run's writes stay)."""
    return WriteGuard(WriteGuardSpec.from_dict(spec.guard)).install() if spec.guard else None


def finish(recorder: StepRecorder, watchdog: StallWatchdog | None, instrumentation: Instrumentation,
           applier: Applier | None, exit_code: int) -> Facts | None:
    """The observed process's end: take the observer off, write the facts with ``exit_code``;
    returns them (None when they could not be written). A loop observed in the user's own
    process (:mod:`torchboost.observe.child.here`) has no watchdog."""
    if watchdog is not None:
        watchdog.stop()
    instrumentation.uninstall()
    if applier is not None:
        applier.uninstall()
        recorder.run.applied = list(applier.notes)
    recorder.stages.profile.close()
    recorder.stages.quick.close()  # a probe step the script's end cut short: its switch off
    recorder.stages.flops.stop(keep=False)  # a step the script's end cut short is not counted
    try:
        return recorder.write_facts(exit_code)
    except Exception as exc:  # noqa: BLE001 - keep the script's own exit status
        if not (isinstance(exc, OSError) and recorder.spec.count_path):  # else the parent says it, once
            print(f"torchboost: could not write {recorder.spec.facts_path}: {exc}", file=sys.stderr)
        return None


class Terminated(BaseException):
    """SIGTERM arrived (torchboost passes a stop on as SIGTERM): the facts are written on the
    way out. Under ``torchboost run``, SIGTERM or SIGHUP (:func:`terminated_by`). Not an
    ``Exception``: a script's ``except Exception`` does not swallow the stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminate(signum: int, _frame: object) -> None:
    raise Terminated(signum)


def terminated_by(*signals: int) -> contextlib.AbstractContextManager[None]:
    """Within the block, each of ``signals`` raises :class:`Terminated` where the script is, so
    its ``finally`` blocks run (main thread only: elsewhere the block changes nothing)."""
    return raising_on(signals, Terminated)


def run_target(target: list[str]) -> None:
    """Run ``[SCRIPT, ARGS...]`` or ``["-m", MODULE, ARGS...]`` as ``__main__``, as Python would."""
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]  # run_module puts the module's file in argv[0]
        # As ``python -m``: the current folder first on the path, so a local package imports
        # (the torchboost console script's own folder is sys.path[0] otherwise).
        sys.path[0] = os.getcwd()
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        script = target[0]
        sys.argv = [script, *target[1:]]  # as typed, as python leaves it
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        if os.path.isfile(script):
            _run_file(script)
        else:  # a directory or zip with a __main__.py
            runpy.run_path(script, run_name="__main__")


def _run_file(script: str) -> None:
    # As python runs a script: __file__ absolute (a script that changes directory, as
    # Hydra does, still finds the files beside it) while sys.argv[0] stays as typed.
    # runpy.run_path would set both to the same string.
    path = os.path.abspath(script)
    with io.open_code(path) as fh:
        code = compile(fh.read(), path, "exec")
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __builtins__=builtins,
                         __loader__=importlib.machinery.SourceFileLoader("__main__", path))
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def exit_status(code: object) -> int:
    """The process exit status for a ``SystemExit`` code, printing a message code as Python does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def print_user_traceback(exc: BaseException, *also_skip: str) -> None:
    """Print the traceback of the user's exception without torchboost's and runpy's frames."""
    # Drop the leading frames of torchboost, runpy and ``also_skip`` (the console script)
    # so the traceback starts in the user's code.
    tb = exc.__traceback__
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep  # torchboost/
    skip = {os.path.abspath(runpy.__file__), *map(os.path.abspath, also_skip)}

    def ours(name: str) -> bool:
        path = os.path.abspath(name)
        return name.startswith("<frozen runpy") or path in skip or path.startswith(package)

    while tb is not None and ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)


if __name__ == "__main__":
    sys.exit(main())
