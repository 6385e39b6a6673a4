"""The levers the tuner can pull: every registered technique's, in the default order.

A lever is one technique (or a set of coupled knobs, like loader workers and intra-op
threads, which compete for the same cores and must move together), declared with its
technique (:mod:`torchboost.techniques`). Given the settings kept so far and what is
known about the script and machine, it proposes a few candidate settings to measure.
"""

from __future__ import annotations

from typing import Any, Mapping

from torchboost.evidence.findings import Measured
from torchboost.evidence.observed import Facts
from torchboost.techniques.registry import Lever, TuneContext, techniques

__all__ = ["Lever", "TuneContext", "default_levers", "order_levers", "techniques_context"]


def default_levers() -> list[Lever]:
    """Every technique's levers, in the order used when the doctor has no finding for them."""
    levers = [lever for technique in techniques() for lever in technique.levers]
    return sorted(levers, key=lambda lever: (lever.priority, lever.id))


def order_levers(levers: list[Lever], expected_speedup: dict[str, float],
                 measured: Mapping[str, Measured] | None = None) -> list[Lever]:
    """The in-process switches first (``Lever.in_process``: decided in bursts inside one run,
    where any other lever costs a run per candidate; on a busy machine's 4 s steps the search
    spent its budget on process trials before bf16 was tried), each group largest gain
    first: the doctor's quick-probe ratio of the lever's own change (``measured`` by finding
    id, see ``Lever.probed_by``) where its pairs agree, else the largest of its findings'
    gains (by id): each one's probe ratio where its pairs agree, else its expected speedup
    (one thread beside a busy loop, probed at x34 as the workers-and-threads lever's
    finding, was ordered by that finding's x2 estimate, behind a bf16 math probed at x1.1,
    and the budget ran out before it); the rest keep their order."""
    measured = measured or {}

    def finding_gain(fid: str) -> float:
        if fid in measured and measured[fid].agree:
            return measured[fid].ratio
        return expected_speedup.get(fid, 1.0)

    def gain(lever: Lever) -> float:
        if lever.probed_by in measured and measured[lever.probed_by].agree:
            return measured[lever.probed_by].ratio
        return max((finding_gain(fid) for fid in lever.finding_ids), default=1.0)

    ranked = sorted(enumerate(levers), key=lambda item: (not item[1].in_process, -gain(item[1]), item[0]))
    return [lever for _, lever in ranked]


def techniques_context(facts: Facts) -> tuple[Any, ...]:
    """Every technique's own tuning facts from the doctor's facts (each technique's
    ``tune_context`` hook), for :attr:`TuneContext.tuning`."""
    return tuple(technique.tune_context(facts) for technique in techniques() if technique.tune_context is not None)
