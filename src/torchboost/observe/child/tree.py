"""Observing a process of a command's tree: a wrapper's ``python``, a launcher's worker, a spawned rank.

``torchboost doctor -- bash train.sh`` (or ``./train.sh``, ``make train``, ``accelerate
launch train.py``, a script whose ranks ``torch.multiprocessing`` spawns) does not start
the training process itself: the command does, somewhere down its tree. Each Python
process of the tree loads torchboost's start-up hook
(:mod:`torchboost.process.inject.sitecustomize`); once the process imports torch, its
start (:mod:`torchboost.process.tree_start`) installs the write guard and the settings
handed over, then, the tree's spec naming this module, calls :func:`observe_process`
here. From then on the process is observed as the bootstrap
observes ``python train.py``: the same recorder, hooks, watchdog and, in a tuning trial,
the same applier; its files are tagged with its process id (``facts.pidN.json``), and the
parent keeps those of the processes that trained, ordered by rank. Processes that never
step (the launcher, loader workers) write nothing, and their watchdog counts no stall.

Where the bootstrap catches the script's end itself, a tree process ends as Python ends
it: the facts are written at exit (:mod:`atexit`); the stop at a step boundary is a
``SystemExit`` (:class:`~torchboost.observe.record.phases.StopObserving`), so the process
leaves with status 0 and a launcher waiting for it goes on as after a finished run; a
SIGTERM passed on by torchboost ends it through ``finally`` blocks with status 143.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Any

from torchboost.handover import Claims
from torchboost.nocode import Applier
from torchboost.observe.child.bootstrap import finish, release_process_group
from torchboost.observe.child.watchdog import StallWatchdog
from torchboost.observe.hooks.instrument import Instrumentation
from torchboost.observe.record.recorder import StepRecorder
from torchboost.observe.spec import ObserveSpec
from torchboost.plan import Bursts

__all__ = ["TreeTerminated", "observe_process"]


class TreeTerminated(SystemExit):
    """SIGTERM or SIGHUP reached an observed process of a tree: it leaves through the
    script's ``finally`` blocks with 128 + the signal's number, as a shell reports it."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def observe_process(spec_path: str, *, applier: Applier | None, claims: Claims,
                    bursts: Bursts | None = None) -> StepRecorder:
    """Observe this process (called once it has imported torch, by the start-up of the
    tree's processes, :mod:`torchboost.process.tree_start`, which has installed the write
    guard and ``applier``, the settings handed over; ``bursts``: a burst trial's switches,
    from the same plan); returns the recorder."""
    spec = ObserveSpec.read(spec_path).for_process(os.getpid())
    recorder = StepRecorder(spec, claims=claims, bursts=bursts)
    watchdog = StallWatchdog(recorder, spec.stall_timeout_s or float("inf"), torchboost_pid=spec.parent_pid,
                             after_first_step=True).start()
    instrumentation = Instrumentation(recorder).install()
    _on_signals(recorder)
    _on_crash(recorder)
    atexit.register(_at_exit, recorder, watchdog, instrumentation, applier)
    return recorder


def _on_signals(recorder: StepRecorder) -> None:
    """SIGTERM/SIGHUP end the process through its ``finally`` blocks, facts written; a
    handler the script or its launcher set is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, _frame: Any) -> None:
        recorder.run.ended, recorder.run.signal = "killed", signal.Signals(signum).name
        raise TreeTerminated(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, stop)


def _on_crash(recorder: StepRecorder) -> None:
    """An uncaught exception marks the run crashed; Python prints it as always."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        recorder.run.ended = "crashed"
        previous(kind, exc, tb)

    sys.excepthook = hook


def _at_exit(recorder: StepRecorder, watchdog: StallWatchdog, instrumentation: Instrumentation,
             applier: Applier | None) -> None:
    """At the process's end: the facts of a process that stepped; nothing from one that did not."""
    if not recorder.timing.boundaries:
        watchdog.stop()
        instrumentation.uninstall()
        return
    ended = recorder.run.ended
    code = {"crashed": 1, "killed": 128 + _signum(recorder.run.signal)}.get(ended, 0)
    finish(recorder, watchdog, instrumentation, applier, code)
    if ended == "stopped":
        release_process_group()


def _signum(name: str | None) -> int:
    try:
        return int(signal.Signals[name]) if name else 0
    except KeyError:
        return 0
