"""The doctor says when other processes took the machine while the script ran: its step
times and share of the peak are then of a shared machine (beside a 2-thread matmul loop
the GPT workload read "0.38% of this machine's fp32 matmul peak", 29% alone)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from torchboost.cli import main
from torchboost.env import BUSY_PCT
from torchboost.report.limits_text import shared_run_words

SCRIPT = Path(__file__).parents[1] / "scripts" / "linear_flops.py"


def test_the_words_appear_only_above_the_threshold():
    assert shared_run_words(BUSY_PCT) is None and shared_run_words(10.0) is None
    assert "other processes used 60% of its CPU" in shared_run_words(60.0)


class _Meter:
    def __init__(self, pct: float) -> None:
        self.pct = pct

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@pytest.mark.slow
@pytest.mark.parametrize("pct, said", [(60.0, True), (0.0, False)])
def test_a_doctor_run_beside_a_busy_neighbour_says_so_in_its_report(tmp_path, monkeypatch, capsys, pct, said):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("torchboost.cli.doctor.LoadMeter", lambda: _Meter(pct))
    out = tmp_path / "doctor"
    code = main(["doctor", "--steps", "3", "--warmup", "1", "--out", str(out), "--json",
                 "--", sys.executable, str(SCRIPT)])
    err = capsys.readouterr().err
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    noted = [n for n in report["headroom"]["notes"] if "other processes used" in n]
    assert bool(noted) is said and ("other processes used 60% of its CPU" in err) is said
    assert not said or "60%" in noted[0]
