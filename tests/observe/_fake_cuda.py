"""CUDA's timing calls faked for a machine without a GPU: events read a device clock we set.

``FakeCuda.install(monkeypatch)`` puts a fake ``torch.cuda.Event`` and
``torch.cuda.synchronize`` in place of torch's for one test. An event's ``record()`` reads
the device clock (``device_ms()``: :attr:`FakeCuda.now_ms`, or the callable given), and
``elapsed_time`` is the difference of two recorded readings, in milliseconds, as CUDA's is.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


class FakeCuda:
    """A device clock in milliseconds, the events that read it and the syncs called on it."""

    def __init__(self, device_ms: Callable[[], float] | None = None, *,
                 on_sync: Callable[[], Any] = lambda: None) -> None:
        self.now_ms = 0.0
        """The device clock when no ``device_ms`` callable is given, milliseconds."""
        self._device_ms = device_ms
        self._on_sync = on_sync
        self.syncs: list[Any] = []
        """One entry per ``torch.cuda.synchronize()`` call: what ``on_sync`` said then."""
        self.events = 0
        """Events recorded so far."""
        fake = self

        class Event:
            """``torch.cuda.Event`` reading the fake device clock."""

            def __init__(self, enable_timing: bool = False, **_: Any) -> None:
                assert enable_timing, "a timing event must be asked for with enable_timing=True"
                self.at: float | None = None

            def record(self, stream: Any = None) -> None:
                self.at = fake.device_ms()
                fake.events += 1

            def elapsed_time(self, end: "Event") -> float:
                if self.at is None or end.at is None:
                    raise RuntimeError("elapsed_time on an event not recorded")
                return end.at - self.at

        self.Event = Event

    def device_ms(self) -> float:
        """The device clock now, milliseconds."""
        return self._device_ms() if self._device_ms is not None else self.now_ms

    def synchronize(self, device: Any = None) -> None:
        """Stands for ``torch.cuda.synchronize``: notes the call."""
        self.syncs.append(self._on_sync())

    def install(self, monkeypatch: Any) -> "FakeCuda":
        """Replace torch's event class and synchronize with these for the test."""
        monkeypatch.setattr(torch.cuda, "Event", self.Event)
        monkeypatch.setattr(torch.cuda, "synchronize", self.synchronize)
        return self
