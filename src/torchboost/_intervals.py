"""Time intervals: union, total length and overlap, for profiler timelines."""

from __future__ import annotations

from typing import Iterable

__all__ = ["covered", "difference", "overlap", "union"]

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering exactly what ``intervals`` cover."""
    merged: list[list[float]] = []
    for start, end in sorted((s, e) for s, e in intervals if e > s):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def covered(intervals: Iterable[Interval]) -> float:
    """Total length covered by ``intervals`` (overlaps counted once)."""
    return sum(e - s for s, e in union(intervals))


def overlap(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """Length of time covered by both ``a`` and ``b``."""
    left, right = union(a), union(b)
    total, i, j = 0.0, 0, 0
    while i < len(left) and j < len(right):
        start, end = max(left[i][0], right[j][0]), min(left[i][1], right[j][1])
        total += max(0.0, end - start)
        if left[i][1] < right[j][1]:
            i += 1
        else:
            j += 1
    return total


def difference(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering what ``a`` covers and ``b`` does not."""
    out: list[Interval] = []
    cuts = union(b)
    for start, end in union(a):
        for low, high in cuts:
            if high <= start or low >= end:
                continue
            if low > start:
                out.append((start, low))
            start = max(start, high)
        if end > start:
            out.append((start, end))
    return out
