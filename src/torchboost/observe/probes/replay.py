"""The replay probe: a few steps fed with batches already seen, re-served from memory.

After the profiler window the doctor runs ``REPLAY_STEPS`` more steps in which the
DataLoader is not asked for a batch: the patched ``__next__``
(:mod:`torchboost.reach.loader_patch`) hands back one of the last few batches it
returned instead. Those steps cost the script's compute and host work, and no loader
work at all (its workers, if any, idle once their prefetch queue is full), so their time
is what no loader change can beat: the data findings' gains are capped by it
(:func:`torchboost.diagnose.data_bound.replay_bound`). Only a bounded run replays (the
script is stopped right after, so its training never sees a batch twice), and only when
its recorded steps waited for data ``REPLAY_MIN_DATA_PCT`` of the time or more.

Only the iterator the training loop took its last batch from is re-served: the replay
starts at a step boundary, so that is the training loader's. Any other loader the script
asks meanwhile (an evaluation pass over a held-out set) is fetched from as usual, and
ends as usual; re-served, its loop would never end.
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
        self._source: int | None = None  # id of the iterator the kept batches came from

    def keep(self, batch: Any, source: Any = None) -> Any:
        """Remember ``batch``, fetched from the iterator ``source`` (the last
        :data:`KEPT_BATCHES` of the last iterator asked); returns it. While re-serving,
        another loader's batches are not kept: the replay's source stays the training loop's."""
        if self.active:
            return batch
        if id(source) != self._source:
            self._kept, self._source = [], id(source)
        self._kept.append(batch)
        if len(self._kept) > KEPT_BATCHES:
            del self._kept[0]
        return batch

    def serves(self, iterator: Any) -> bool:
        """Whether ``iterator``'s next batch is re-served: while :attr:`active`, for the
        iterator the kept batches came from (see the module docstring)."""
        return self.active and id(iterator) == self._source

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
