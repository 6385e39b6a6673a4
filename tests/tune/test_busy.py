"""Too busy to tell: a noise floor wider than the top candidate's gain is said, with what to do."""

from __future__ import annotations

import dataclasses

import pytest

from slow_script import SlowScript
from test_search import CPU2

from torchboost.evidence.findings import Measured
from torchboost.tune.levers import default_levers, order_levers
from torchboost.tune.search import SearchOptions, run_search


@pytest.mark.parametrize("noise, busy", [(0.4, True), (0.01, False)])
def test_a_floor_wider_than_the_top_gain_says_too_busy_to_tell(noise, busy):
    measured = {"precision.lower": Measured(1.1, 6, "bf16 autocast")}  # at most 9% faster
    script = SlowScript(step_ms=1000.0, factors={("precision.mode", "bf16"): 0.92}, noise=noise)
    context = dataclasses.replace(CPU2, measured=measured, has_loader=False)
    levers = [lv for lv in order_levers(default_levers(), {}, measured) if lv.id == "precision"]
    outcome = run_search(levers, context, script, SearchOptions(budget_s=2000), clock=script.clock)
    said = [w for w in outcome.warnings if w.startswith("too busy to tell")]
    assert bool(said) is busy  # twin: quiet, the 8% gain is told apart and kept
    if busy:
        assert "more than the 9% bf16 could gain (x1.10 by the doctor)" in said[0]
        assert "tune would measure it first and decide in about" in said[0]
    else:
        assert outcome.settings.get("precision.mode") == "bf16"
