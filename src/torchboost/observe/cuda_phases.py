"""Device time of a step's phases on CUDA, from events resolved at the step's boundary."""

from __future__ import annotations

import torch

__all__ = ["CudaPhases"]


class CudaPhases:
    """Device time of phases via CUDA events, resolved at the step boundary (after a sync)."""

    def __init__(self) -> None:
        self._open: dict[int, torch.cuda.Event] = {}
        self._done: list[tuple[int, torch.cuda.Event, torch.cuda.Event]] = []

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
        for phase in seen:
            acc[phase] = device[phase]
        self._done.clear()
        self._open.clear()
