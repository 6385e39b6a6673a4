"""The prepared loader's position, so a checkpoint resumes mid-epoch exactly.

:class:`ResumableLoader` knows the epoch, the batches consumed in it, and the random
number generators' states at the epoch's start and now. A resumed run re-creates the
epoch's sample order, skips the consumed batches and then restores the generators, so it
continues exactly where the saved run was.
"""

from __future__ import annotations

import random
from typing import Any, Iterator

import torch

from torchboost.techniques.microbatch import batch_size_of

__all__ = ["CheckpointError", "ResumableLoader", "capture_rng", "restore_rng"]


class CheckpointError(RuntimeError):
    """A checkpoint could not be read safely, or lacks what was asked of it."""


# -- random number generators --------------------------------------------------------------


def capture_rng(generators: list[torch.Generator] = ()) -> dict[str, Any]:
    """The state of torch's global RNG (CPU, and CUDA once initialised), Python's ``random``
    and ``generators``, as tensors and plain containers (``weights_only``-loadable)."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": [version, list(internal), gauss],
        "generators": [g.get_state() for g in generators],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any], generators: list[torch.Generator] = ()) -> None:
    """Put back what :func:`capture_rng` returned (``generators`` in the same order)."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    saved = state["generators"]
    if len(saved) != len(generators):
        raise CheckpointError(
            f"the checkpoint holds {len(saved)} loader generator state(s) but the loader has "
            f"{len(generators)}; resume with the loader built as in the saved run"
        )
    for generator, value in zip(generators, saved):
        generator.set_state(value)
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _generators(loader: Any) -> list[torch.Generator]:
    # The loader's own generator draws the workers' base seed; a RandomSampler's draws
    # the order. They are often the same object, so each is kept once.
    found: list[torch.Generator] = []
    for owner in (loader, getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        g = getattr(owner, "generator", None)
        if isinstance(g, torch.Generator) and all(g is not f for f in found):
            found.append(g)
    return found


def _exact_len(loader: Any) -> int | None:
    if isinstance(getattr(loader, "dataset", None), torch.utils.data.IterableDataset):
        return None  # len() of an IterableDataset loader is an estimate at best
    try:
        return len(loader)
    except TypeError:
        return None


_END = object()


class ResumableLoader:
    """Wraps the prepared loader: knows its position and which batch ends the epoch.

    Args:
        loader: the loader to iterate (the prepared ``DeviceLoader``).
        lookahead: fetch batch i+1 before yielding batch i, to know that batch i is the
            last when the loader's length is unknown (IterableDataset). Otherwise the last
            batch is known from ``len(loader)`` and nothing is fetched early, so the order
            of random draws is exactly a plain loop's.

    Each pass over it is one epoch; a sampler with ``set_epoch`` (DistributedSampler) is
    told the epoch first. ``len()`` and any other attribute pass through to ``loader``.
    """

    def __init__(self, loader: Any, *, lookahead: bool = False) -> None:
        self.loader = loader
        self.lookahead = lookahead or _exact_len(loader) is None
        self.epoch = 0
        """The pass in progress (0-based); after ``load_state_dict``, the pass to resume."""
        self.consumed = 0
        """Batches yielded so far in this pass."""
        self.current_is_last = False
        """Whether the batch yielded last is the last of its pass."""
        self.current_size: int | None = None
        """Samples in the batch yielded last."""
        self._next_epoch = 0
        self._resume: dict[str, Any] | None = None
        self._epoch_rng: dict[str, Any] | None = None
        self._in_pass: object | None = None  # the live pass's token

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        token = object()
        self._in_pass = token
        resume, self._resume = self._resume, None
        self.epoch = resume["epoch"] if resume else self._next_epoch
        self._next_epoch = self.epoch + 1
        sampler = getattr(self.loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        generators = _generators(self.loader)
        if resume:
            restore_rng(resume["epoch_rng"], generators)
        self._epoch_rng = capture_rng(generators)
        self.consumed, self.current_is_last, self.current_size = 0, False, None
        length = _exact_len(self.loader)
        try:
            it = iter(self.loader)
            skip = resume["consumed"] if resume else 0
            while self.consumed < skip and next(it, _END) is not _END:
                self.consumed += 1
            upcoming = next(it, _END) if self.lookahead else None
            if resume:
                restore_rng(resume["rng"], generators)
            while True:
                if self.lookahead:
                    batch, upcoming = upcoming, (_END if upcoming is _END else next(it, _END))
                    last = upcoming is _END
                else:
                    batch = next(it, _END)
                    last = length is not None and self.consumed + 1 >= length
                if batch is _END:
                    return
                self.consumed += 1
                self.current_is_last, self.current_size = last, batch_size_of(batch)
                # No early return after the last batch: exhausting the iterator is part of
                # a plain loop (a RandomSampler draws from its generator at its end).
                yield batch
        finally:
            if self._in_pass is token:  # a pass abandoned earlier must not end a newer one
                self._in_pass = None
                self.current_is_last = False

    def state_dict(self) -> dict[str, Any]:
        """The position: epoch, batches consumed, RNG states at the epoch's start and now."""
        now = capture_rng(_generators(self.loader))
        if self._in_pass is None:
            return {"epoch": self._next_epoch, "consumed": 0, "epoch_rng": now, "rng": now}
        return {"epoch": self.epoch, "consumed": self.consumed, "epoch_rng": self._epoch_rng, "rng": now}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at ``state`` when the next pass begins (RNGs are restored then)."""
        self._resume = dict(state)
        self.epoch = self._next_epoch = int(state["epoch"])
