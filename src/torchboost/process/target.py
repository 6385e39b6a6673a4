"""The user's script run in this process as ``__main__``, as ``python`` would run it.

Both the observed child (:mod:`torchboost.observe.child.bootstrap`) and ``torchboost run``
run the target here: the ``sys.argv`` and ``sys.path[0]`` it would see if run directly, its
``SystemExit`` code turned into an exit status as Python does, its traceback printed
without torchboost's frames, and a stop passed on as a signal raised where the script is
(:class:`Terminated`), so its ``finally`` blocks run.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.machinery
import io
import os
import runpy
import sys
import traceback
import types

from torchboost._signals import raising_on

__all__ = ["Terminated", "exit_status", "print_user_traceback", "run_target", "terminate", "terminated_by"]


class Terminated(BaseException):
    """SIGTERM arrived (torchboost passes a stop on as SIGTERM): the facts are written on the
    way out. Under ``torchboost run``, SIGTERM or SIGHUP (:func:`terminated_by`). Not an
    ``Exception``: a script's ``except Exception`` does not swallow the stop."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def terminate(signum: int, _frame: object) -> None:
    """A signal handler: raise :class:`Terminated` where the script is."""
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
        if os.path.isfile(script):
            sys.path[0] = _script_folder(script)
            _run_file(script)
        else:  # a directory or zip with a __main__.py
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")


def _script_folder(script: str) -> str:
    # As python: the folder of the file that symbolic links lead to, not the link's, so a
    # script linked from elsewhere imports the modules beside the real file.
    return os.path.dirname(os.path.realpath(script))


def _main_file(script: str) -> str:
    # As python: absolute (a script that changes directory, as Hydra does, still finds the
    # files beside it), the current folder joined to the path as typed, neither normalised
    # ("./train.py" stays in it) nor resolved (a link's own name).
    return script if os.path.isabs(script) else os.path.join(os.getcwd(), script)


def _run_file(script: str) -> None:
    # __file__ as python gives it while sys.argv[0] stays as typed: runpy.run_path would set
    # both to the same string.
    path = _main_file(script)
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
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # torchboost/
    skip = {os.path.abspath(runpy.__file__), *map(os.path.abspath, also_skip)}

    def ours(name: str) -> bool:
        path = os.path.abspath(name)
        return name.startswith("<frozen runpy") or path in skip or path.startswith(package)

    while tb is not None and ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)


