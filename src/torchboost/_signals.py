"""Signals that raise where the program is, so its ``finally`` blocks run: one helper for
the observed child (:mod:`torchboost.observe.child.bootstrap`), ``torchboost run`` and the
parent's wait (:mod:`torchboost.process.process_group`)."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Callable, Iterable, Iterator

__all__ = ["raising_on"]


@contextlib.contextmanager
def raising_on(signals: Iterable[int], exception: Callable[[int], BaseException]) -> Iterator[None]:
    """Within the block, each of ``signals`` raises ``exception(signum)``; the handlers before
    are put back after it. Only the main thread can set handlers: elsewhere the block
    changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise exception(signum)

    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
