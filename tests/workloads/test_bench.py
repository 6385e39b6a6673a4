"""benchmarks/bench.py: planning, summaries, skipped peers, and a smoke run of every row."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

_BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    sys.path.insert(0, str(_BENCH_DIR))  # bench.py finds _loops.py next to it, as when run as a script
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_{name}", _BENCH_DIR / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(_BENCH_DIR))


bench = _load("bench")
loops = _load("_loops")
mfu = _load("_mfu")


def _args(**kw) -> argparse.Namespace:
    base = dict(smoke=False, quick=False, steps=None, warmup=None, repeats=None)
    return argparse.Namespace(**{**base, **kw})


def test_modes_and_overrides():
    assert bench.plan_modes(_args(quick=True)).repeats == 3
    smoke = bench.plan_modes(_args(smoke=True))
    assert smoke.repeats == 1 and set(smoke.steps) == {"gpt", "vision", "mlp", "data"}
    custom = bench.plan_modes(_args(steps=50, warmup=5, repeats=2))
    assert custom.steps["mlp"] == 50 and custom.warmup["gpt"] == 5 and custom.repeats == 2
    with pytest.raises(ValueError, match="--warmup 9 must be below --steps 9"):
        bench.plan_modes(_args(steps=9, warmup=9))


def _run(sps: float, loss: float = 1.0) -> dict:
    return {"samples_per_s": sps, "peak_memory_bytes": 2**20, "final_loss": loss, "first_loss": 2.0,
            "steps": 10, "warmup_steps": 2, "total_s": 1.0}  # fmt: skip


def test_summary_takes_medians_and_ratios_to_naive_and_hand():
    cells = [
        bench.summarise("mlp", "naive", [_run(100), _run(300), _run(200)]),
        bench.summarise("mlp", "hand", [_run(400), _run(400), {"error": "exit 1: boom"}]),
        bench.summarise("mlp", "torchboost", [_run(800)]),
        bench.summarise("mlp", "lightning", [{"error": "exit 1: no"}]),
    ]
    bench._add_ratios(cells)
    naive, hand, boost, failed = cells
    assert naive.samples_per_s == 200 and naive.ratio_to_naive == 1.0 and naive.ratio_to_hand == 0.5
    assert hand.samples_per_s == 400 and hand.reason == "1 of 3 runs failed"
    assert boost.ratio_to_naive == 4.0 and boost.ratio_to_hand == 2.0
    assert failed.status == "failed" and "no" in failed.reason and failed.ratio_to_naive is None


def test_a_missing_peer_is_a_skipped_row_with_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "lightning" else real(name))
    assert "pip install -e '.[bench]'" in bench._skip_reason("lightning")
    assert bench._skip_reason("naive") == ""


@pytest.mark.parametrize("workload", ["gpt", "vision", "mlp", "data"])
def test_every_hand_choice_has_a_reason(workload):
    for device in ("cpu", "cuda"):
        choices = loops.hand_choices(workload, torch.device(device))
        assert {"num_workers", "optimizer", "bf16", "compile"} <= set(choices.reasons)
        assert all(reason.strip() for reason in choices.reasons.values())
        assert choices.persistent_workers == (choices.num_workers > 0)


@pytest.mark.slow
def test_smoke_run_has_all_five_rows_per_workload(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(_BENCH_DIR / "bench.py"), "--smoke", "--out", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["mode"]["repeats"] == 1 and report["machine"]["cpu_cores"] >= 1
    by_workload: dict[str, dict[str, dict]] = {}
    for cell in report["results"]:
        by_workload.setdefault(cell["workload"], {})[cell["row"]] = cell
    assert set(by_workload) == {"gpt", "vision", "mlp", "data"}
    for workload, rows in by_workload.items():
        assert list(rows) == ["naive", "hand", "lightning", "accelerate", "torchboost"], workload
        assert rows["naive"]["status"] == "ok" and rows["hand"]["status"] == "ok", rows
        assert rows["naive"]["ratio_to_naive"] == 1.0
        for row, cell in rows.items():
            assert cell["status"] in ("ok", "skipped"), (workload, row, cell["reason"])
            if cell["status"] == "skipped":
                assert cell["reason"], (workload, row)
            else:
                assert cell["samples_per_s"] > 0 and cell["final_loss"] > 0
    assert "samples/s" in proc.stdout and "x naive" in proc.stdout
    assert "MFU" in proc.stdout and 0 < by_workload["mlp"]["naive"]["mfu_pct"] < 100
    assert report["machine"]["peak_flops_per_s"] > 0


def _mlp_tiny_matmuls_per_sample() -> int:
    """mlp tiny (8 layers): Linear(32, 64), 6 x Linear(64, 64), Linear(64, 4); one sample's multiply-adds."""
    return 32 * 64 + 6 * 64 * 64 + 64 * 4


def test_flops_per_sample_is_forward_and_backward_of_every_linear():
    per_sample = mfu.flops_per_sample("mlp", "tiny")
    macs = _mlp_tiny_matmuls_per_sample()
    # forward 2 x MACs; backward: every weight's gradient, and every input's but the first layer's
    exact = 2 * macs + 2 * macs + 2 * (macs - 32 * 64)
    assert per_sample == pytest.approx(exact)
    assert per_sample != pytest.approx(2 * macs)  # the twin: counting the forward alone


def test_mfu_is_samples_per_s_times_flops_per_sample_over_the_peak():
    assert mfu.mfu_pct(1000.0, 2.0e6, 1.0e10) == pytest.approx(20.0)
    assert mfu.mfu_pct(None, 2.0e6, 1.0e10) is None and mfu.mfu_pct(1000.0, 2.0e6, None) is None
