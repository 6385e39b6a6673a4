"""The tracker probe: the tracker's call the sampler found, skipped for a step and put back.

A stand-in ``wandb`` module (a tracker's import name) holds the call, so that the test
needs no tracker installed."""

from __future__ import annotations

import sys
import types

import pytest

from torchboost.evidence.host_lines import HostLine
from torchboost.techniques.registry import ProbeContext
from torchboost.techniques.trackers import tracker_switch


def _ctx(callee: str) -> ProbeContext:
    line = HostLine("other", "/home/me/train.py", 40, "run.log({'loss': loss})", callee, {5: 30.0})
    return ProbeContext(model=None, optimizer=None, loader=None, device="cpu", host_lines=(line,))


@pytest.fixture
def tracker(monkeypatch):
    module = types.ModuleType("wandb")
    logged: list[object] = []

    class Run:
        def log(self, data: object) -> str:
            logged.append(data)
            return "logged"

    module.Run, module.logged = Run, logged
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def test_the_probe_skips_the_trackers_call_for_a_step_and_puts_it_back(tracker):
    switch = tracker_switch(_ctx("wandb.Run.log"))
    assert switch is not None and switch.finding_id == "host.tracker" and switch.setting == {}
    original = tracker.Run.__dict__["log"]
    switch.on()
    try:
        assert tracker.Run().log({"loss": 1.0}) is None and tracker.logged == []  # nothing logged this step
    finally:
        switch.off()
    assert tracker.Run.__dict__["log"] is original and tracker.Run().log({"loss": 1.0}) == "logged"


def test_no_probe_where_the_call_is_no_trackers_or_cannot_be_found_again(tracker):
    assert tracker_switch(_ctx("json.dumps")) is None  # the twin: a library that tracks nothing
    assert tracker_switch(_ctx("wandb.Run.not_there")) is None
    assert tracker_switch(_ctx("wandb.train.<locals>.log")) is None
