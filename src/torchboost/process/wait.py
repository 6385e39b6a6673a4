"""The parent's wait for its child: progress shown, a time limit, and the end of a tree's training.

Under ``python train.py`` the observed process is the child itself: it ends when its
observation ends. A command's tree (``bash train.sh``, ``accelerate launch``, spawned ranks)
may go on after its training processes have ended: a wrapper's next line, the script
after ``mp.spawn`` returns. Those are given :data:`AFTER_TRAINING_S` to end by
themselves; then the command is ended as a stop would end it (SIGTERM, its ``finally``
blocks run), so that the run stays as bounded as it is for ``python train.py``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import psutil

from torchboost.process.process_group import descendants, end_group, kill_group, survivors

__all__ = ["AFTER_TRAINING_S", "Waited", "progress_reader", "wait_for"]

AFTER_TRAINING_S = 10.0
"""Seconds a command may go on after every process of it that trained has ended."""
_TICK_S = 0.2


@dataclass
class Waited:
    """How the wait ended."""

    timed_out: bool = False
    """The child ran past its time limit and was killed."""
    went_on: list[str] = field(default_factory=list)
    """The command's processes that went on after its training had ended, and were ended
    ("pid N (command)"); empty when the command ended by itself."""


def wait_for(proc: subprocess.Popen, *, timeout_s: float | None, show: Callable[[], None] | None = None,
             trained: Callable[[], bool] | None = None) -> Waited:
    """Wait for ``proc``; ``show`` is called each tick (progress), ``trained`` says whether
    the command's training processes have all ended (None: never asked)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    done_at: float | None = None
    while True:
        try:
            proc.wait(timeout=_TICK_S)
            return Waited()
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if deadline is not None and now > deadline:
            kill_group(proc)
            return Waited(timed_out=True)
        if trained is not None and done_at is None and trained():
            done_at = now
        if done_at is not None and now - done_at > AFTER_TRAINING_S:
            went_on = survivors([*_itself(proc), *descendants(proc.pid)])
            end_group(proc, signal.SIGTERM)
            return Waited(went_on=went_on)
        if show is not None:
            show()


def _itself(proc: subprocess.Popen) -> list[psutil.Process]:
    try:
        return [psutil.Process(proc.pid)]
    except psutil.Error:
        return []


def progress_reader(path: Path, on_progress: Callable[[dict[str, Any]], None]) -> Callable[[], None]:
    """A ``show`` for :func:`wait_for`: reads the child's progress line and calls
    ``on_progress`` with each new one."""
    last: list[dict[str, Any]] = []

    def show() -> None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return  # not written yet
        if not last or data != last[0]:
            last[:] = [data]
            on_progress(data)

    return show
