"""The one module that patches ``torch.utils.data.DataLoader``, and restores it exactly.

Two parts of torchboost reach into the script's DataLoaders, each through a
:class:`LoaderPatch` made here:

* the observer (:mod:`torchboost.observe.hooks.instrument`), with :func:`timed_iteration`:
  ``DataLoader.__iter__`` tells which loader feeds the loop (once per epoch),
  ``_BaseDataLoaderIter.__next__`` times the wait for each batch (single- and
  multi-process iterators both inherit it), and the dataset fetchers' ``fetch`` times
  each batch's making, wall against CPU, where it is made
  (:mod:`torchboost.reach.sample_clock`);
* the no-code applier (:mod:`torchboost.nocode`), with :func:`rewritten_arguments`:
  ``DataLoader.__init__`` builds each loader with the configured arguments.

``uninstall`` puts back the very objects that were in the class's ``__dict__`` (or
removes the attribute when the class had none of its own), so PyTorch is as it was.
"""

from __future__ import annotations

import functools
import inspect
import time
from typing import Any, Callable, Protocol

import torch.utils.data.dataloader as _dl

from torchboost.reach.sample_clock import FETCH_ATTRIBUTES, SampleClock

__all__ = ["ITERATION_ATTRIBUTES", "INIT_ATTRIBUTES", "BatchObserver", "LoaderPatch", "rewritten_arguments",
           "timed_iteration"]

ITERATION_ATTRIBUTES: tuple[tuple[type, str], ...] = ((_dl.DataLoader, "__iter__"), (_dl._BaseDataLoaderIter, "__next__"),
                                                      *FETCH_ATTRIBUTES)
"""(class, attribute) pairs :func:`timed_iteration` replaces."""
INIT_ATTRIBUTES: tuple[tuple[type, str], ...] = ((_dl.DataLoader, "__init__"),)
"""(class, attribute) pairs :func:`rewritten_arguments` replaces."""

_MISSING = object()


class BatchObserver(Protocol):
    """What :func:`timed_iteration` tells (the :class:`~torchboost.observe.record.recorder.StepRecorder`)."""

    def loader_iter(self, loader: Any, iterator: Any) -> None:
        """``loader`` made ``iterator`` (once per epoch)."""

    def data_begin(self) -> None:
        """The loop asks for a batch."""

    def loader_batch(self, iterator: Any, ms: float) -> None:
        """A batch came from ``iterator`` after ``ms`` milliseconds."""


class LoaderPatch:
    """Replacements for DataLoader attributes: ``install`` puts them in, ``uninstall`` restores.

    ``wrappers`` maps (class, attribute) to a function of the original returning its
    replacement.
    """

    def __init__(self, wrappers: dict[tuple[type, str], Callable[[Any], Any]]) -> None:
        self._wrappers = wrappers
        self._originals: list[tuple[type, str, Any]] = []

    @property
    def installed(self) -> bool:
        """True between ``install()`` and ``uninstall()``."""
        return bool(self._originals)

    def install(self) -> "LoaderPatch":
        """Replace each attribute by its wrapper of the original; refused when installed."""
        if self._originals:
            raise RuntimeError("this DataLoader patch is already installed")
        for (owner, name), wrap in self._wrappers.items():
            own = owner.__dict__.get(name, _MISSING)
            self._originals.append((owner, name, own))
            setattr(owner, name, wrap(getattr(owner, name)))
        return self

    def uninstall(self) -> None:
        """Put back exactly what was there; safe to call twice."""
        for owner, name, own in reversed(self._originals):
            if own is _MISSING:
                delattr(owner, name)  # it was inherited: let the base class's show again
            else:
                setattr(owner, name, own)
        self._originals = []


def timed_iteration(observer: BatchObserver, clock: Callable[[], float] = time.perf_counter,
                    samples: SampleClock | None = None) -> LoaderPatch:
    """A patch telling ``observer`` which loader iterates and how long each batch took, and
    timing each batch's making into ``samples`` (a new :class:`SampleClock` when None)."""
    samples = SampleClock() if samples is None else samples

    def wrap_iter(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def __iter__(loader: Any) -> Any:
            samples.iterating(loader)  # before its workers start: they inherit their loader
            iterator = original(loader)
            samples.made(loader, iterator)
            observer.loader_iter(loader, iterator)
            return iterator

        return __iter__

    # the doctor's replay probe (torchboost.observe.probes.replay), on the recorder's stages
    replay = getattr(getattr(observer, "stages", None), "replay", None)

    def wrap_next(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def __next__(iterator: Any) -> Any:
            observer.data_begin()
            samples.fetching(iterator)
            start = clock()
            if replay is None:
                batch = original(iterator)
            else:  # a replay step re-serves a batch already seen: no loader work
                batch = replay.serve() if replay.serves(iterator) else replay.keep(original(iterator), iterator)
            observer.loader_batch(iterator, (clock() - start) * 1000.0)
            return batch

        return __next__

    return LoaderPatch(dict(zip(ITERATION_ATTRIBUTES, (wrap_iter, wrap_next, samples.timed, samples.timed))))


def rewritten_arguments(rewrites: list[Callable[[dict[str, Any]], None]],
                        built: Callable[[Any], None] | None = None) -> LoaderPatch:
    """A patch building every DataLoader with its arguments passed through ``rewrites``.

    Each rewrite changes the dict of the loader's arguments (by name, the script's own
    included) in place, in order; ``built`` is then given each loader so built.
    """

    def wrap_init(original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def __init__(loader_self: Any, *args: Any, **kwargs: Any) -> None:
            arguments = dict(signature.bind(loader_self, *args, **kwargs).arguments)
            arguments.pop("self", None)
            for rewrite in rewrites:
                rewrite(arguments)
            original(loader_self, **arguments)
            if built is not None:
                built(loader_self)

        return __init__

    return LoaderPatch({INIT_ATTRIBUTES[0]: wrap_init})
