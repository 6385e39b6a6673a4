"""The interaction pass: two changes that gained too little alone, tried together."""

from __future__ import annotations

from typing import Any

from torchboost.config import Overlay
from torchboost.tune.search.decision import Decision, Status
from torchboost.tune.search.levers import Lever
from torchboost.tune.search.parity import EXACT, STATISTICAL

__all__ = ["INTERACTION", "INTERACTION_TITLE", "TOGETHER", "interaction_lever", "retry_lever"]


INTERACTION = "interaction"
"""Id of the last pass's lever: a near-miss of a coupled lever with a near-miss of another."""
INTERACTION_TITLE = "levers that pay together"
TOGETHER = "together"
"""Id of a lever tried again on top of one kept after it (``Lever.retry_after``): bf16 with compile."""


def interaction_lever(levers: list[Lever], decisions: list[Decision], screened: dict[str, list[tuple[float, Overlay]]],
                       incumbent: Overlay, options: Any) -> Lever | None:
    """Two changes that each gained nothing alone may gain together: on 2 cores a second
    loader worker only pays once channels_last has freed the training process's core.
    So the coupled levers' runners-up (within ``interaction_margin`` of the kept choice in
    screening, same knobs) are tried once more, each combined with every exact lever that
    was correct and faster in its pairs, but not by enough to be kept alone. None when
    there is nothing to combine."""
    by_id = {lever.id: lever for lever in levers}
    kept = {d.lever: d.settings for d in decisions if d.status is Status.KEPT}
    near: list[Overlay] = []
    for lever_id, results in screened.items():
        lever = by_id.get(lever_id)
        if lever is None or not lever.coupled_with or lever_id not in kept or not results:
            continue
        best_ms = min(ms for ms, _ in results)
        near += [change for ms, change in sorted(results, key=lambda item: item[0])
                 if change != kept[lever_id] and change.keys() == kept[lever_id].keys()
                 and ms <= best_ms * (1 + options.interaction_margin)][: options.interaction_hosts]
    missed = [d.settings for d in decisions
              if d.status is Status.NOT_BEYOND_NOISE and d.ratios and d.ratio is not None and d.ratio < 1.0
              and by_id.get(d.lever) is not None and by_id[d.lever].parity == EXACT
              and not by_id[d.lever].coupled_with and not by_id[d.lever].fixed_cost]
    proposals = [host | other for host in near for other in missed
                 if not set(host) & set(other) and incumbent | host | other != incumbent]
    if not proposals:
        return None
    return Lever(INTERACTION, INTERACTION_TITLE, EXACT, lambda inc, ctx: proposals,
                 fallback_parity=STATISTICAL)


def retry_lever(levers: list[Lever], decisions: list[Decision], incumbent: Overlay) -> Lever | None:
    """A lever that was correct but not kept for its time (bf16 no faster in fp32's eager
    kernels), tried once more on top of a lever it names in ``retry_after`` that was kept
    after it (compile): fusion in bf16 can pay where it does not in fp32, and can lose,
    so the pair is timed and judged on its time like any candidate. Its extra fixed cost
    (compiling again in bf16, on a warm cache) is what its runs spend beyond the incumbent's.
    None when there is nothing to retry."""
    kept = {d.lever: d for d in decisions if d.status is Status.KEPT}
    for lever in levers:
        after = [kept[other] for other in lever.retry_after if other in kept]
        missed = [d for d in decisions if d.lever == lever.id and d.status in (Status.NOT_BEYOND_NOISE, Status.SLOWER)]
        if not after or not missed or decisions.index(after[0]) < decisions.index(missed[-1]):
            continue
        change = missed[-1].settings
        if incumbent | change == incumbent:
            continue
        title = f"{lever.title} with {after[0].title}"
        host_draws = any(other.id == after[0].lever and other.draws_own_random for other in levers)
        return Lever(TOGETHER, title, lever.parity, lambda inc, ctx, change=change: [change],
                     draws_own_random=lever.draws_own_random or host_draws,
                     subject=lambda c, lever=lever, host=after[0]: f"{lever.subject(c) if lever.subject else lever.title} "
                                                                 f"with {host.subject or host.title}")
    return None
