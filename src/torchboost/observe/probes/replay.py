"""The replay probe: a few steps fed with batches already seen, re-served from memory.

After the profiler window the doctor runs ``REPLAY_STEPS`` more steps in which the
DataLoader is not asked for a batch: the patched ``__next__``
(:mod:`torchboost.observe.hooks.loader_patch`) hands back one of the last few batches it
returned instead. Those steps cost the script's compute and host work, and no loader
work at all (its workers, if any, idle once their prefetch queue is full), so their time
is what no loader change can beat: the data findings' gains are capped by it
(:func:`torchboost.diagnose.data_bound.replay_bound`). Only a bounded run replays (the
script is stopped right after, so its training never sees a batch twice), and only when
its recorded steps waited for data ``REPLAY_MIN_DATA_PCT`` of the time or more.
"""

from __future__ import annotations

from typing import Any

from torchboost.observe.spec import REPLAY_STEPS

__all__ = ["ReplayBatches", "REPLAY_STEPS", "KEPT_BATCHES"]

REPLAY_MIN_DATA_PCT = 5.0
"""The recorded steps' share waiting for data, percent, under which there is no replay: no
data finding to bound, and a compute-bound script's doctor run stays as long as it was."""
KEPT_BATCHES = 2
"""The last batches kept for re-serving (references only: no copy)."""


class ReplayBatches:
    """Keeps the last batches the loop got; re-serves them while :attr:`active`."""

    def __init__(self) -> None:
        self.active = False
        """Batches are re-served instead of fetched (the replay steps)."""
        self.step_ms: list[float] = []
        """Total time of each replay step, milliseconds."""
        self._kept: list[Any] = []
        self._served = 0

    def keep(self, batch: Any) -> Any:
        """Remember ``batch`` (the last :data:`KEPT_BATCHES`); returns it."""
        self._kept.append(batch)
        if len(self._kept) > KEPT_BATCHES:
            del self._kept[0]
        return batch

    def start(self) -> bool:
        """Start re-serving; False (nothing to re-serve) when no batch was kept."""
        self.active = bool(self._kept)
        return self.active

    def serve(self) -> Any:
        """The next kept batch, in turn."""
        batch = self._kept[self._served % len(self._kept)]
        self._served += 1
        return batch

    def stop(self) -> None:
        """Stop re-serving and let the batches go."""
        self.active = False
        self._kept.clear()
