"""Device time of a step's phases on CUDA, from events resolved at the step's boundary."""

from __future__ import annotations

import torch

__all__ = ["CudaPhases"]


class CudaPhases:
    """Device time of phases via CUDA events, resolved at the step boundary (after a sync).

    ``carve_from`` is the phase that encloses carved-out spans (the optimizer step, whose
    closure runs forward and backward inside it): their device time is taken out of it.
    """

    def __init__(self, carve_from: int) -> None:
        self._open: dict[int, torch.cuda.Event] = {}
        self._done: list[tuple[int, torch.cuda.Event, torch.cuda.Event]] = []
        self._carve_from = carve_from
        self._carve_start: torch.cuda.Event | None = None
        self._carved: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def carve_begin(self) -> None:
        self._carve_start = torch.cuda.Event(enable_timing=True)
        self._carve_start.record()

    def carve_end(self) -> None:
        if self._carve_start is not None:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._carved.append((self._carve_start, event))
            self._carve_start = None

    def begin(self, phase: int) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._open[phase] = event

    def end(self, phase: int) -> None:
        start = self._open.pop(phase, None)
        if start is not None:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._done.append((phase, start, event))

    def collect(self, acc: list[float]) -> None:
        """Replace host times by device times; the caller has synchronized."""
        device = [0.0] * len(acc)
        seen = set()
        for phase, start, end in self._done:
            device[phase] += start.elapsed_time(end)
            seen.add(phase)
        if self._carve_from in seen:
            carved = sum(start.elapsed_time(end) for start, end in self._carved)
            device[self._carve_from] = max(0.0, device[self._carve_from] - carved)
        for phase in seen:
            acc[phase] = device[phase]
        self._done.clear()
        self._open.clear()
        self._carved.clear()
        self._carve_start = None
