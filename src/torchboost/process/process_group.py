"""The observed child's process group: started apart, ended whole, signals passed on.

Every observed run (doctor, a tuning trial, a capped verification run) and every whole
end-to-end run of tune's check (:func:`run_group`) starts here (:func:`start_group`), in a
session and process group of its own, with no stdin (:mod:`.no_stdin`), so that ending it ends the script's own children
too (loader workers, compile workers, torchrun's ranks), and a terminal's Ctrl-C does not
hit it behind our back. While it runs, SIGINT, SIGTERM, SIGHUP and SIGQUIT (Ctrl-\\) to
torchboost are caught and passed on to the whole group (SIGINT as SIGINT, so the script's
``finally`` blocks run and its facts are written; the others as SIGTERM), so that the
user's files are put back before torchboost ends; a group still alive after
:data:`GRACE_S` is killed. torchboost then raises :class:`Interrupted`, and the command
exits with 128 + the signal's number, as a shell reports a process killed by it. A
process the script detached into a session of its own (``setsid``) is outside the group
and lives on: :attr:`Interrupted.survivors` names it, so the message says only what was
ended. A whole end-to-end run is not observed and passes no signal on: anything that
interrupts its wait kills its group at once (:func:`run_group`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import time
from typing import IO, Iterator, Mapping

import psutil

from torchboost._signals import raising_on
from torchboost.process.no_stdin import STDIN

__all__ = ["GRACE_S", "Interrupted", "descendants", "end_group", "end_tree", "ended_below", "forwarded_signals",
           "kill_group", "run_group", "signal_name", "start_group", "survivors"]

GRACE_S = 10.0
"""Seconds the child's group has to end after a passed-on signal before it is killed."""
_CAUGHT = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class Interrupted(KeyboardInterrupt):
    """torchboost was told to stop by ``signum``; the child's group has been ended."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum
        self.survivors: list[str] = []
        """The script's processes still running after its group was ended (each
        "pid N (command)"): ones it detached into a session of their own (``setsid``)."""


def signal_name(signum: int) -> str:
    """``SIGKILL`` for 9, ..."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


@contextlib.contextmanager
def forwarded_signals() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM/SIGHUP raise :class:`Interrupted` (main thread only:
    elsewhere the block changes nothing)."""
    with raising_on(_CAUGHT, Interrupted):
        yield


def end_group(proc: subprocess.Popen, signum: int) -> list[str]:
    """Pass ``signum`` on to the child's group, wait :data:`GRACE_S`, then kill what is left.
    Returns the child's descendants still running after that (see :func:`survivors`)."""
    tree = descendants(proc.pid)  # before the end: orphans lose their place in the tree
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    try:
        proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    # A wrapper (bash train.sh) ends at once; the python it started still runs its finally
    # blocks and writes its facts: the whole tree has the same grace before the kill.
    psutil.wait_procs(tree, timeout=max(deadline - time.monotonic(), 0.0))
    kill_group(proc)
    psutil.wait_procs(tree, timeout=1.0)  # a SIGKILL takes a moment to land
    return survivors(tree)


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below ``pid`` now (children, theirs, ...); [] when it is gone."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def survivors(tree: list[psutil.Process]) -> list[str]:
    """Those of ``tree`` still running (a zombie is not), as "pid N (command)": processes
    that left the group, which ending it did not reach."""
    alive = []
    for process in tree:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(f"pid {process.pid} ({' '.join(process.cmdline())[:80] or process.name()})")
        except psutil.Error:
            continue  # ended meanwhile
    return alive


def end_tree(tree: list[psutil.Process], grace_s: float = GRACE_S) -> list[str]:
    """SIGTERM each process of ``tree``, SIGKILL those alive after ``grace_s``, and return
    any still running then (see :func:`survivors`). For the processes a script started in
    torchboost's own process (``torchboost run``), which share no group of their own."""
    for process in tree:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=1.0)
    return survivors(tree)


def ended_below(signum: int) -> Interrupted:
    """End every process left below this one (a script run here: its loader workers,
    persistent ones too, and what they started); the stop to raise, for the command's
    "stopped by" line."""
    gc.collect()  # a loader no longer referenced shuts its workers down itself
    # torch's SIGCHLD handler would raise in the middle of this for a worker ended here
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    stop = Interrupted(signum)
    stop.survivors = end_tree(descendants(os.getpid()))
    return stop


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL every process of the child's group, and reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def start_group(argv: list[str], *, stdout: int | IO[bytes] | None, stderr: int | IO[bytes] | None,
                env: Mapping[str, str] | None) -> subprocess.Popen:
    """Start ``argv`` in a session and process group of its own (a terminal's Ctrl-C does
    not reach it; :func:`kill_group` ends it whole), with no stdin (:mod:`.no_stdin`)."""
    return subprocess.Popen(argv, stdin=STDIN, stdout=stdout, stderr=stderr, env=env, start_new_session=True)


def run_group(argv: list[str], *, env: Mapping[str, str] | None, timeout_s: float | None) -> int | None:
    """Run ``argv`` to its end in a group of its own (:func:`start_group`), its output
    dropped; returns its exit status, or None when it ran past ``timeout_s`` (its group is
    then killed). Anything that interrupts the wait (Ctrl-C) kills the group at once and is
    raised on; a ``KeyboardInterrupt`` carries ``survivors`` (see :func:`survivors`), so
    the stop message says what lives on."""
    proc = start_group(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return None
    except BaseException as exc:
        tree = descendants(proc.pid)  # before the kill: orphans lose their place in the tree
        kill_group(proc)
        if isinstance(exc, KeyboardInterrupt):
            exc.survivors = survivors(tree)  # type: ignore[attr-defined]
        raise
