"""torch.compile's failed guards in words: what changed between calls, and what to do."""

from __future__ import annotations

import pytest

from torchboost.techniques.compile.compile_facts import CompileFacts, _guard, _kind


@pytest.mark.parametrize("reason, guard, kind", [
    ("0/0: GLOBAL_STATE changed: grad_mode ", "GLOBAL_STATE changed: grad_mode", "grad mode"),
    ("1/2: tensor 'x' size mismatch at index 0. expected 4, actual 5", "tensor 'x' size mismatch at index 0. "
     "expected 4, actual 5", "shape"),
    ("2/0: ___stack0 == 10.28   # if h.sum().item() > 1e9:  # x.py:22 in f\nUser stack trace:", "___stack0 == 10.28",
     "a Python value"),
    ("3/1: tensor 'x' dtype mismatch. expected Float, actual Half", "tensor 'x' dtype mismatch. expected Float, "
     "actual Half", "dtype"),
    ("4/0: something new", "something new", "other"),  # twin: an unknown guard is not passed off as a known kind
])
def test_a_failed_guard_is_named_by_what_changed(reason, guard, kind):
    assert _guard(reason) == guard and _kind([guard]) == kind


def test_facts_rebuilt_from_report_json_are_typed_again():
    facts = CompileFacts(frames=2, cache_misses=3, graph_breaks=[{"reason": "r", "where": "x.py:3", "code": "c",
                                                                  "fix": "f", "count": 1}],
                         recompiles=[{"function": "forward", "where": "x.py:1", "reasons": ["g"], "count": 2}])
    assert facts.graph_breaks[0].where == "x.py:3" and facts.recompiles[0].reasons == ("g",)
    assert facts.cache == "cold" and CompileFacts(cache_hits=2).cache == "warm" and CompileFacts().cache == ""
