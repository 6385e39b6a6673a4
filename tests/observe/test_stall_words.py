"""A run ended past the bound on torchboost's own work at a step boundary is torchboost's stall,
said so in the child's line, the doctor's report and tune's words, never blamed on the script."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from torchboost.observe import ObserveSpec, StepRecorder
from torchboost.observe.child.watchdog import BOOKKEEPING_LIMIT_S, OWN_WORK, StallWatchdog
from torchboost.report.doctor_report import ending_words
from torchboost.tune.trials.trial import failure_words


def _record(tmp_path, bookkeeping: bool) -> tuple[dict, str]:
    spec = ObserveSpec(out_dir=str(tmp_path), profile_active=0)
    recorder = StepRecorder(spec, clock=lambda: 0.0)
    recorder.timing.bookkeeping = bookkeeping
    return StallWatchdog(recorder, timeout_s=60.0).stall_record(125.0)


@pytest.mark.parametrize("bookkeeping", [True, False])
def test_a_stall_in_torchboosts_own_work_is_said_to_be_torchboosts(tmp_path, bookkeeping):
    # The 5 s-step script beside a busy loop: the profiler's reading of its recorded steps
    # took 125 s at a step boundary. Twin: the same 125 s outside any boundary's work is the
    # script's stall, as before.
    stall, line = _record(tmp_path, bookkeeping)
    assert stall["own"] is bookkeeping and (stall["doing"] == OWN_WORK) is bookkeeping
    assert stall["limit_s"] == (BOOKKEEPING_LIMIT_S if bookkeeping else 60.0)
    assert ("not the script's" in line) is bookkeeping and ("the script" in line.replace("not the script's", "")) \
        is not bookkeeping
    facts = SimpleNamespace(ended="stalled", stall=stall, steps=[], steps_seen=12, warmup_steps=5, signal=None,
                            exit_code=124)
    words = failure_words(facts, 124, "", "no training step completed")
    assert ("not a stall of the script's" in words) is bookkeeping
    assert words.startswith("stalled: no training step") is not bookkeeping
    ending = ending_words(facts)
    assert ending.startswith("torchboost ended the run") is bookkeeping
    assert ending.startswith("The script stalled") is not bookkeeping
