"""What any loader change can give at most, measured: the replay probe's bound on the data findings.

The doctor times a few steps fed with batches already seen, re-served from memory
(:mod:`torchboost.observe.replay`): the step with no loader work at all. No change to the
DataLoader (workers, pinning, prefetch) can make a step faster than that, so

    replay_bound = median recorded step time / median replay step time

caps every data finding's expected speedup (ids ``data.*``), and each data finding's notes
give the measurement.
"""

from __future__ import annotations

import dataclasses
import statistics

from torchboost.evidence.findings import Finding
from torchboost.evidence.observed import Facts
from torchboost.evidence.steps import measured_steps

__all__ = ["DATA_FINDING_PREFIX", "cap_by_replay", "replay_bound"]

DATA_FINDING_PREFIX = "data."
"""The ids of the findings whose fix is a loader change."""


def replay_bound(facts: Facts) -> tuple[float, float, float] | None:
    """(bound, median recorded step ms, median replay step ms); None without replay steps."""
    steps = measured_steps(facts)
    if not facts.replay_step_ms or not steps:
        return None
    recorded = statistics.median(s.total_ms for s in steps)
    replayed = statistics.median(facts.replay_step_ms)
    if replayed <= 0:
        return None
    return max(1.0, recorded / replayed), recorded, replayed


def cap_by_replay(findings: list[Finding], facts: Facts) -> list[Finding]:
    """``findings`` with each data finding's gain capped at the replay bound, and the
    measurement in its notes; the others unchanged (and all of them without replay steps)."""
    found = replay_bound(facts)
    if found is None:
        return list(findings)
    bound, recorded, replayed = found
    measured = (f"measured: fed batches already seen from memory (no loader work), the step took "
                f"{replayed:.1f} ms against {recorded:.1f} ms: no loader change can give more than {bound:.2f}x")
    out = []
    for f in findings:
        if f.id.startswith(DATA_FINDING_PREFIX):
            if f.expected_speedup > bound:
                note = f"{measured}; capped there (estimated {f.expected_speedup:.2f}x)"
                f = dataclasses.replace(f, expected_speedup=bound, severity="", notes=[*f.notes, note])
            else:
                f = dataclasses.replace(f, notes=[*f.notes, measured])
        out.append(f)
    return out
