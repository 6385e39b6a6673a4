"""Whether a faster step repays what a change costs once: compile's first-call time, or
any start-up it adds (worker start, the hand-over's memory manager), over the planned run."""

from __future__ import annotations

import statistics

from torchboost.tune.search.decision import Status, compile_break_even, paired_step_ms
from torchboost.tune.search.levers import Lever
from torchboost.tune.search.pairs import Pairs
from torchboost.tune.search.search_options import SearchOptions

__all__ = ["repaid", "cannot_pay_off"]


def cannot_pay_off(lever: Lever, incumbent_ms: float, options: SearchOptions) -> tuple[str, float] | None:
    """A fixed cost (a compile) that cannot be repaid, even its least, over the planned run:
    the reason in words and the least break-even in steps; None when it might be."""
    if not lever.fixed_cost or options.run_steps is None:
        return None
    most_saved_s = options.run_steps * incumbent_ms * options.compile_max_gain / 1e3
    if most_saved_s >= options.compile_min_s:
        return None
    least_break_even = 1e3 * options.compile_min_s / (incumbent_ms * options.compile_max_gain)
    return (f"cannot pay off: {options.run_steps} steps x {incumbent_ms:.1f} ms save at most "
            f"{most_saved_s:.1f} s, and a {lever.fixed_cost} costs at least {options.compile_min_s:.0f} s "
            f"(break-even at least {least_break_even:.0f} steps)"), least_break_even


def repaid(lever: Lever, pairs: Pairs, run_steps: int | None, fixed_noise_s: float) -> tuple[Status, str, float | None]:
    """(status, reason, break-even steps) of a candidate faster per step: kept when the
    time it saves over ``run_steps`` repays its fixed cost beyond the baseline's own spread
    of fixed costs (``fixed_noise_s``, seconds); a compile is judged on the warm cache's cost,
    the one every later run pays (tune's runs fill the compile cache ``run`` uses)."""
    ratio, n = statistics.median(pairs.ratios), len(pairs.ratios)
    eager_ms = statistics.median(pairs.incumbent_ms)
    candidate_ms = paired_step_ms(pairs.incumbent_ms, pairs.ratios)  # the saving follows the paired ratio
    # Fixed costs vary from run to run too: only what exceeds the baseline's own spread counts.
    extra_s = statistics.median(pairs.candidate_fixed) - statistics.median(pairs.incumbent_fixed) - fixed_noise_s
    kept = f"median ratio {ratio:.3f} over {n} pair(s)"
    fixed = lever.fixed_cost
    if fixed:
        cold_s, warm_s = pairs.compile_costs()
        extra_s = max(extra_s, warm_s)
        kept += f"; {fixed} {cold_s:.1f} s on the first run, {warm_s:.1f} s on every later one (cache warm)"
    if extra_s <= 0:
        return Status.KEPT, kept, 0.0 if fixed else None
    break_even = compile_break_even(extra_s, eager_ms, candidate_ms)
    if run_steps is None and fixed:  # a fixed cost is judged against a known run only
        return Status.NOT_REPAID, (
            f"{fixed} takes {extra_s:.1f} s and pays off after {break_even:.0f} steps, but the run's length "
            "is unknown: pass --run-steps to judge it"), break_even
    if run_steps is not None and break_even >= run_steps:
        what = f"{fixed} takes" if fixed else "it adds"
        return Status.NOT_REPAID, (
            f"{what} {extra_s:.1f} s and saves {eager_ms - candidate_ms:.2f} ms/step: "
            f"it pays off after {break_even:.0f} steps, the run has {run_steps}"), break_even
    return Status.KEPT, f"{kept}; its {extra_s:.1f} s fixed cost pays off after {break_even:.0f} steps", break_even
