"""Strict JSON: every file torchboost writes parses where non-finite constants are refused.

Python's ``json`` writes a NaN loss as the bare token ``NaN``, which strict parsers (a
browser's ``JSON.parse``, ``jq``, Go, Rust) refuse. :func:`dumps` writes each non-finite
number as ``null`` and names it, by its JSON Pointer (RFC 6901), in the top-level object's
``"non_finite"`` field (``{"/losses/0": "nan"}``); :func:`loads` puts the numbers back, so
a file read by torchboost holds what was written.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["NON_FINITE", "dumps", "loads"]

NON_FINITE = "non_finite"
"""The top-level field naming the numbers written as null: JSON Pointer -> "nan", "inf", "-inf"."""


def _word(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _escape(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _scrub(value: Any, path: str, found: dict[str, str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        found[path] = _word(value)
        return None
    if isinstance(value, dict):
        return {key: _scrub(item, f"{path}/{_escape(key)}", found) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(item, f"{path}/{i}", found) for i, item in enumerate(value)]
    return value


def dumps(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` with every non-finite number written as null and named in the top-level
    object's :data:`NON_FINITE` field (a non-object with one raises ``ValueError``)."""
    found: dict[str, str] = {}
    clean = _scrub(data, "", found)
    if found:
        if not isinstance(clean, dict):
            raise ValueError(f"non-finite numbers outside an object cannot be named: {sorted(found)}")
        clean = {**clean, NON_FINITE: found}
    return json.dumps(clean, allow_nan=False, **kwargs)


def _put(data: Any, pointer: str, value: float) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    target = data
    for part in parts[:-1]:
        target = target[int(part)] if isinstance(target, list) else target[part]
    last = parts[-1]
    if isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value


def loads(text: str | bytes) -> Any:
    """``json.loads``, the numbers :func:`dumps` wrote as null put back (NaN, inf)."""
    data = json.loads(text)
    if isinstance(data, dict) and isinstance(data.get(NON_FINITE), dict):
        marks = data.pop(NON_FINITE)
        for pointer, word in marks.items():
            try:
                _put(data, pointer, float(word))
            except (KeyError, IndexError, TypeError, ValueError):
                continue  # a pointer into what is no longer there: the null stays
    return data
