"""Quantities as a reader sees them, shared by stages that do not import each other."""

from __future__ import annotations

__all__ = ["bytes_text"]


def bytes_text(n: int | None, missing: str = "n/a") -> str:
    """Bytes, compactly: "812 MiB" under a GiB, "12.40 GiB" above; ``missing`` when not
    measured (None or 0)."""
    if not n:
        return missing
    if n < 2**30:
        return f"{n / 2**20:.0f} MiB"
    gib = n / 2**30
    return f"{gib:.2f} GiB" if gib < 100 else f"{gib:.1f} GiB"
