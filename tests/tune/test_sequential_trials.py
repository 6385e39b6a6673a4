"""The search's pair runs stop once decided: slow steps spend less of the budget."""

from __future__ import annotations

import dataclasses

import pytest

from slow_script import SlowScript
from test_search import CPU2

from torchboost.evidence.findings import Measured
from torchboost.tune.search.levers import default_levers, order_levers
from torchboost.tune.search import SearchOptions, run_search

BF16 = {"precision.lower": Measured(1.5, 6, "bf16 autocast")}


def _pairs_only(levers):
    """The precision lever as one no quick probe times: confirmed in pairs of runs, not in
    alternating bursts (this file is about the pairs' runs)."""
    return [dataclasses.replace(lv, probed_by="") for lv in levers if lv.id == "precision"]


@pytest.mark.parametrize("sequential", [True, False])
def test_a_clear_candidates_pairs_stop_once_decided(sequential):
    script = SlowScript(factors={("precision.mode", "bf16"): 0.66})
    measure = script.measure if sequential else script  # twin: a measure that cannot stop runs every step
    context = dataclasses.replace(CPU2, measured=BF16)
    levers = _pairs_only(order_levers(default_levers(), {}, BF16))
    outcome = run_search(levers, context, measure, SearchOptions(budget_s=3000), clock=script.clock)
    decision = next(d for d in outcome.decisions if d.lever == "precision")
    assert decision.status == "kept" and decision.ratio == pytest.approx(0.66, rel=0.03)
    pairs = [t for s, _, t in script.calls if s]
    assert len(pairs) >= 2
    # 30 steps of 4 s a trial (2.6 s for bf16); its pairs' B's, decided, stop at the floor of 8 steps.
    assert (script.now < 900) is sequential  # 833 s against 1010 s


@pytest.mark.parametrize("wrapped", ["keywords", "named"])
def test_a_measure_wrapped_with_keywords_still_stops_decided_pairs(wrapped):
    """tune passes its measure through a wrapper that notes coverage (``*args, **kwargs``):
    the search must still hand it the sequential stop. Twin: the measure itself, by name."""
    script = SlowScript(factors={("precision.mode", "bf16"): 0.66})

    def passed_on(settings, repeat, **keywords):  # the shape of tune's coverage wrapper
        keywords.pop("slower_than_ms", None)  # this fake never stops a slow screening
        return script.measure(settings, repeat, **keywords)

    measure = passed_on if wrapped == "keywords" else script.measure
    context = dataclasses.replace(CPU2, measured=BF16)
    levers = _pairs_only(order_levers(default_levers(), {}, BF16))
    run_search(levers, context, measure, SearchOptions(budget_s=3000), clock=script.clock)
    assert script.now < 900  # the pairs' B's stopped once decided: 833 s against 1010 s in full


def test_a_measure_that_ignores_the_keywords_runs_every_trial_in_full():
    """The twin of the wrapper: a measure that takes the fixed keywords and cannot stop a
    trial runs every trial in full."""
    script = SlowScript(factors={("precision.mode", "bf16"): 0.66})
    context = dataclasses.replace(CPU2, measured=BF16)
    levers = _pairs_only(order_levers(default_levers(), {}, BF16))
    run_search(levers, context, lambda settings, repeat, **_: script(settings, repeat), SearchOptions(budget_s=3000),
               clock=script.clock)
    assert script.now > 900
