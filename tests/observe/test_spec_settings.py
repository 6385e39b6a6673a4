"""ObserveSpec says how to observe, never what to apply: a trial's settings, a burst trial's
switches among them, reach the child in its plan alone (:mod:`torchboost.handover`)."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

from torchboost import handover
from torchboost.config import BoostConfig, Overlay, section_classes
from torchboost.observe import ObserveSpec
from torchboost.plan import Bursts, Plan
from torchboost.tune.trials.trial import TrialRequest

SETTINGS = Overlay({"cpu.threads": 1})
BURSTS = Bursts(Overlay({"precision.mode": "bf16"}), steps=2, pairs=4, min_gain=0.03)
_CARRIERS = (BoostConfig, Overlay, Plan, Bursts, *section_classes().values())


def _types(hint: Any) -> set[Any]:
    """``hint`` and every type inside it (``dict[str, Overlay] | None``: dict, str, Overlay, None)."""
    return {hint}.union(*(_types(arg) for arg in typing.get_args(hint)))


def _names() -> set[str]:
    """Every section's table name and every setting's dotted name."""
    sections = section_classes()
    return set(sections) | {f"{name}.{f.name}" for name, cls in sections.items() for f in dataclasses.fields(cls)}


def _words(value: Any) -> set[str]:
    """Every string in a JSON-able value, a table's keys included."""
    if isinstance(value, dict):
        return set(map(str, value)).union(*map(_words, value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*map(_words, value))
    return {value} if isinstance(value, str) else set()


def settings_carried(spec: Any) -> list[str]:
    """The fields of ``spec`` (a spec dataclass instance) that carry settings: typed with the
    configuration's own types, or holding a section's or a setting's name in what it writes."""
    hints = typing.get_type_hints(type(spec))
    names = _names()
    return [f.name for f in dataclasses.fields(spec)
            if any(t in _CARRIERS for t in _types(hints[f.name]))
            or _words(json.loads(json.dumps(getattr(spec, f.name), default=str))) & names]


def _trial_spec(tmp_path) -> ObserveSpec:
    """The spec a burst trial's child is given, built as the parent builds it."""
    request = TrialRequest(command=["python", "train.py"], settings=SETTINGS, repeat=0,
                           plan=Plan.tuned(SETTINGS, bursts=BURSTS), steps=3, warmup=1, out_dir=tmp_path)
    return ObserveSpec(out_dir=str(tmp_path), **request.run_request().spec_fields())


def test_observe_spec_carries_no_settings_of_its_own(tmp_path):
    spec = _trial_spec(tmp_path)
    assert settings_carried(spec) == []
    assert not _words(list(spec.to_dict().values())) & _names()  # nor does the file the child reads


def test_twin_a_spec_with_a_channel_for_settings_is_flagged(tmp_path):
    """The burst trial's old channel, a table of the change by dotted name, and a typed one."""
    fields = [("bursts", dict[str, Any] | None, None), ("settings", Overlay, Overlay())]
    twin = dataclasses.make_dataclass("TwinSpec", [(n, t, dataclasses.field(default=d)) for n, t, d in fields],
                                      bases=(ObserveSpec,), frozen=True)
    spec = twin(out_dir=str(tmp_path), bursts={"precision.mode": "bf16"})
    assert settings_carried(spec) == ["bursts", "settings"]
    assert settings_carried(twin(out_dir=str(tmp_path))) == ["settings"]  # typed: flagged even when empty


def test_a_burst_trials_switches_reach_the_child_in_its_plan(tmp_path, monkeypatch):
    """The parent writes the trial's plan once, the child reads it once: the settings and the
    burst trial's switches together. Twin: an ordinary trial's plan has no switches."""
    request = TrialRequest(command=["python", "train.py"], settings=SETTINGS, repeat=0,
                           plan=Plan.tuned(SETTINGS, bursts=BURSTS), steps=3, warmup=1, out_dir=tmp_path)
    for plan, bursts in ((request.run_request().apply, BURSTS), (Plan.tuned(SETTINGS), None)):
        path = tmp_path / f"plan-{bursts is not None}.json"
        handover.write_plan(path, plan)  # the parent's side
        monkeypatch.setenv(handover.TRIAL_SETTINGS_ENV, str(path))
        read = handover.trial_plan()  # the child's side, once
        assert read.apply == SETTINGS and read.bursts == bursts
        assert read.bursts is None or (read.bursts.change == {"precision.mode": "bf16"} and read.bursts.pairs == 4)
