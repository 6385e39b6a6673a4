"""The levers the tuner can pull: every registered technique's, in the default order.

A lever is one technique (or a set of coupled knobs, like loader workers and intra-op
threads, which compete for the same cores and must move together), declared with its
technique (:mod:`torchboost.techniques`). Given the settings kept so far and what is
known about the script and machine, it proposes a few candidate settings to measure.
"""

from __future__ import annotations

from torchboost.techniques.registry import Lever, TuneContext, techniques

__all__ = ["Lever", "TuneContext", "default_levers", "order_levers"]


def default_levers() -> list[Lever]:
    """Every technique's levers, in the order used when the doctor has no finding for them."""
    levers = [lever for technique in techniques() for lever in technique.levers]
    return sorted(levers, key=lambda lever: (lever.priority, lever.id))


def order_levers(levers: list[Lever], expected_speedup: dict[str, float]) -> list[Lever]:
    """Largest expected gain first (from the doctor's findings by id); the rest keep their order."""

    def gain(lever: Lever) -> float:
        return max((expected_speedup.get(fid, 1.0) for fid in lever.finding_ids), default=1.0)

    ranked = sorted(enumerate(levers), key=lambda item: (-gain(item[1]), item[0]))
    return [lever for _, lever in ranked]
