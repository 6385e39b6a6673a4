"""How loader workers hand batches to the training process: torch's sharing strategy.

A worker puts each batch's tensors in shared memory and sends a handle. With torch's
Linux default, ``file_descriptor``, the receiving process fetches every tensor's file
descriptor over a socket from a thread of the worker, which needs the worker's GIL: a
worker busy in Python code answers late, and the training loop waits. ``file_system``
sends a file name instead, with no round trip. PyTorch's documentation notes its cost:
if processes die without cleaning up, shared-memory files can be left behind
(``torch_shm_manager`` removes them when every user has exited).

The strategy is chosen by the *sending* process, so it is set inside each worker, by a
picklable ``worker_init_fn`` wrapper that then calls the user's own: it holds for any
start method (fork, spawn, forkserver) and leaves the training process's own setting
alone.
"""

from __future__ import annotations

from typing import Any, Callable

import torch.multiprocessing as mp

__all__ = ["STRATEGIES", "WorkerSharing", "available", "sharing_of", "with_sharing"]

STRATEGIES = ("file_descriptor", "file_system")
"""The strategies torch knows; :func:`available` says which this platform has."""


def available(strategy: str) -> bool:
    """True when this platform supports ``strategy``."""
    return strategy in mp.get_all_sharing_strategies()


class WorkerSharing:
    """A ``worker_init_fn`` that sets the sharing strategy, then runs the user's function."""

    def __init__(self, strategy: str, inner: Callable[[int], Any] | None = None) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"sharing strategy: expected one of {', '.join(STRATEGIES)}; got {strategy!r}")
        self.strategy = strategy
        self.inner = inner
        """The user's own ``worker_init_fn``, or None."""

    def __call__(self, worker_id: int) -> None:
        mp.set_sharing_strategy(self.strategy)
        if self.inner is not None:
            self.inner(worker_id)

    def __repr__(self) -> str:
        return f"WorkerSharing({self.strategy!r}, {self.inner!r})"


def sharing_of(worker_init_fn: Any) -> str | None:
    """The strategy a loader's ``worker_init_fn`` sets, or None (torch's default)."""
    return worker_init_fn.strategy if isinstance(worker_init_fn, WorkerSharing) else None


def with_sharing(worker_init_fn: Any, strategy: str | None) -> Any:
    """``worker_init_fn`` set up to use ``strategy`` (None: torch's default, unwrapped)."""
    inner = worker_init_fn.inner if isinstance(worker_init_fn, WorkerSharing) else worker_init_fn
    return inner if strategy is None else WorkerSharing(strategy, inner)
