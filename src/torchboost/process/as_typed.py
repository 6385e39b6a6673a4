"""A command run as the user typed it, in this process's group, signals passed on.

``torchboost run`` runs ``python train.py`` in its own process; any other command it
runs as typed and waits for (:func:`run_as_typed`), passing SIGINT, SIGTERM and SIGHUP on:

* a torchrun job: torchrun starts every rank, and each runs ``torchboost run`` on the
  script in its own process, so the settings apply on every rank;
* a launcher's tree (``bash train.sh``, ``accelerate launch train.py``): every Python
  process it starts applies the plan once it imports torch, through the start-up hook
  that reaches every Python process of the command (:mod:`torchboost.process.tree_spec`)
  and the plan's hand-over (:mod:`torchboost.handover`), read once in each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from torchboost.handover import TRIAL_SETTINGS_ENV, write_plan
from torchboost.plan import Plan
from torchboost.process.process_group import ended_below
from torchboost.process.tree_spec import TREE_ENV, TreeSpec, tree_env

__all__ = ["passing_signals", "run_as_typed"]


def run_as_typed(command: Sequence[str], plan: Plan | None = None) -> int:
    """Run ``command`` as typed, ``plan`` (None: none to hand over) applied in every Python
    process of it; its exit status. After a signal passed on, what is left is ended and
    :class:`~torchboost.process.process_group.Interrupted` raised. Under tune's end-to-end
    check the check's tree spec (its write guard) stays."""
    if plan is None:
        return passing_signals(subprocess.Popen(list(command)))
    with tempfile.TemporaryDirectory(prefix="torchboost-run-") as tmp:
        settings = Path(tmp) / "settings.json"
        write_plan(settings, plan)
        env = {**os.environ, TRIAL_SETTINGS_ENV: str(settings)}
        if TREE_ENV not in env:  # else tune's end-to-end check already put its guard there
            spec = Path(tmp) / "spec.json"
            TreeSpec().write(spec)
            env.update(tree_env(spec))
        return passing_signals(subprocess.Popen(list(command), env=env))


def passing_signals(proc: subprocess.Popen) -> int:
    """Wait for ``proc`` (a command run in this process's group: a torchrun job, a
    launcher's tree), passing SIGINT, SIGTERM and SIGHUP on to it; after one, what is left
    below this process is ended and :class:`Interrupted` raised (:func:`ended_below`)."""
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
        raise ended_below(received[0])
    return status
