"""GPU facts and findings from real traces recorded on A100s, against HolisticTraceAnalysis.

HTA's figures (tests/data/hta/README.md says how they were produced) are the independent
reference: our idle and compute shares must be within 2 points of them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost.frameworks import fix_toml
from torchboost.diagnose import diagnose
from torchboost.diagnose.trace_file import facts_from_trace, load_traces

DATA = Path(__file__).resolve().parents[1] / "data" / "hta"
HTA = {  # trace -> [(rank, idle %, compute %, non-compute %)], from HTA 0.5.0's temporal breakdown
    "alexnet_a100.json.gz": [(0, 99.49, 0.08, 0.43)],
    "control.json.gz": [(3, 16.20, 61.23, 22.57)],
    "negative_queue_rank0.json.gz": [(0, 69.44, 14.15, 16.41)],
    "two_ranks": [(0, 53.56, 17.71, 28.74), (1, 54.72, 22.57, 22.72)],
}


def _ranks(name: str):
    return sorted((facts_from_trace(f, d, i) for i, (f, d) in enumerate(load_traces(DATA / name))),
                  key=lambda f: f.rank)


@pytest.mark.parametrize("name", sorted(HTA))
def test_idle_and_compute_shares_match_hta_within_2_points(name):
    ranks = _ranks(name)
    assert [f.rank for f in ranks] == [rank for rank, *_ in HTA[name]] or name == "alexnet_a100.json.gz"
    for facts, (_, idle, compute, non_compute) in zip(ranks, HTA[name]):
        gpu = facts.gpu
        assert abs(gpu["idle_pct"] - idle) <= 2.0, (gpu["idle_pct"], idle)
        assert abs(gpu["compute_pct"] - compute) <= 2.0, (gpu["compute_pct"], compute)
        assert abs(gpu["non_compute_pct"] - non_compute) <= 2.0
        assert gpu["busy_pct"] + gpu["idle_pct"] == pytest.approx(100.0)


def test_a_wrong_window_would_miss_hta():
    """The broken twin: counting the last, cut-short step too moves the figure off HTA's."""
    from torchboost.diagnose.gpu import gpu_facts

    file, data = load_traces(DATA / "control.json.gz")[0]
    events = [e for e in data["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")]
    assert abs(gpu_facts(events).idle_pct - 16.20) > 0.1  # without HTA's step window, a different answer


def test_a_gpu_bound_trace_is_not_told_it_is_data_bound():
    facts = _ranks("control.json.gz")[0]
    assert facts.gpu["idle_pct"] < 30
    ids = [f.id for f in diagnose(facts)]
    assert "gpu.idle" not in ids and "data.workers" not in ids
    assert "gpu.collectives" in ids  # 35% in NCCL kernels, under half of it under compute
    assert "gpu.syncs" in ids  # 61 cudaStreamSynchronize/DeviceSynchronize over 5 steps


def test_a_launch_bound_trace_gets_the_small_kernels_finding():
    facts = _ranks("negative_queue_rank0.json.gz")[0]
    assert facts.gpu["small_kernel_pct"] > 50 and facts.gpu["idle_pct"] > 60
    findings = {f.id: f for f in diagnose(facts)}
    assert "gpu.small_kernels" in findings and "compile" in fix_toml(findings["gpu.small_kernels"])
    assert "launch-bound" in findings["gpu.idle"].title  # idle without waiting for data


def test_an_idle_gpu_trace_gets_the_idle_and_copy_findings():
    facts = _ranks("two_ranks")[0]
    ids = [f.id for f in diagnose(facts)]
    assert "gpu.idle" in ids and "gpu.pageable_copies" in ids
    idle = next(f for f in diagnose(facts) if f.id == "gpu.idle")
    assert idle.expected_speedup == pytest.approx(1 / (1 - 0.5 * facts.gpu["idle_pct"] / 100))


@pytest.mark.slow
def test_doctor_trace_writes_the_report_with_ranks_and_gpu_facts(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--trace", str(DATA / "two_ranks"),
                           "--out", str(tmp_path / "doc"), "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert [r["rank"] for r in report["ranks"]] == [0, 1] and report["job"]["world_size"] == 128
    assert abs(report["gpu"]["idle_pct"] - (53.56 if report["job"]["slowest_rank"] == 0 else 54.72)) <= 2.0
    assert (tmp_path / "doc" / "report.html").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", [
    (["--trace", "nope.json"], "no such file or folder"),
    (["--trace", "{tmp}/bad.json"], "not a readable trace"),
    (["--trace", "{tmp}", "--", "python", "x.py"], "give it no command"),
])
def test_doctor_trace_bad_input_is_one_line(tmp_path, argv, message):
    (tmp_path / "bad.json").write_text("{not json")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", *argv, "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def _hand_trace(marks: int, *, script_sync: bool = False, stop_sync: bool = True, device_marks: bool = False):
    """Kineto events as torch.profiler writes them for ``marks`` steps of 10 ms on one host
    thread: each step launches two 3 ms kernels, 2 ms apart on the device; with
    ``script_sync`` the step then calls ``.item()`` (``aten::item`` > ``_local_scalar_dense`` >
    ``cudaStreamSynchronize``); with ``stop_sync``, the profiler's own ``cudaDeviceSynchronize``
    at its stop, after the last step; with ``device_marks``, Kineto's copy of each step's mark
    on the device's timeline (``gpu_user_annotation``)."""
    host = {"ph": "X", "pid": 1, "tid": 1}
    events = []
    for step in range(marks):
        t = 10_000.0 * step
        events.append({**host, "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "ts": t, "dur": 10_000.0})
        for k, launch in enumerate((1000.0, 3000.0)):
            corr = 100 + 2 * step + k
            events += [
                {**host, "cat": "cpu_op", "name": "aten::mm", "ts": t + launch, "dur": 500.0},
                {**host, "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t + launch + 100, "dur": 100.0,
                 "args": {"correlation": corr}},
                {"ph": "X", "pid": 0, "tid": 7, "cat": "kernel", "name": "ampere_sgemm_128x64_nn",
                 "ts": t + 1300 + 5000 * k, "dur": 3000.0, "args": {"stream": 7, "correlation": corr}},
            ]
        if script_sync:
            events += [
                {**host, "cat": "cpu_op", "name": "aten::item", "ts": t + 8000, "dur": 1000.0},
                {**host, "cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": t + 8100, "dur": 800.0},
                {**host, "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": t + 8200, "dur": 600.0},
            ]
        if device_marks:
            events.append({"ph": "X", "pid": 0, "tid": 7, "cat": "gpu_user_annotation",
                           "name": f"ProfilerStep#{step + 1}", "ts": t + 1300, "dur": 8000.0, "args": {}})
    if stop_sync:  # torch.profiler's stop syncs the device before it ends the trace
        events.append({**host, "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 10_000.0 * marks + 500,
                       "dur": 50.0})
    return events


def _hand_facts(events):
    return facts_from_trace(Path("hand.json"), {"traceEvents": events}, 0)


def test_the_profiler_s_own_stop_sync_is_not_the_script_s():
    # Two step marks, as the doctor's profiler window writes them (one step kept, as HTA
    # keeps it): a script that never syncs has no sync, and no gpu.syncs finding.
    facts = _hand_facts(_hand_trace(2))
    assert facts.gpu["steps"] == 1 and facts.gpu["idle_pct"] >= 10
    assert facts.gpu["syncs"] == 0 and facts.gpu["sync_ops"] == {}
    assert "gpu.syncs" not in [f.id for f in diagnose(facts)]


def test_twin_the_same_sync_inside_a_step_is_counted_and_fires():
    events = _hand_trace(2, stop_sync=False)
    events.append({"ph": "X", "pid": 1, "tid": 1, "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                   "ts": 9500.0, "dur": 50.0})  # the script's torch.cuda.synchronize() in step 1
    facts = _hand_facts(events)
    assert facts.gpu["syncs"] == 1 and facts.gpu["sync_ops"] == {"cudaDeviceSynchronize": 1}
    assert "gpu.syncs" in [f.id for f in diagnose(facts)]


def test_a_script_s_item_is_counted_once_per_kept_step_under_the_operator_that_made_it():
    facts = _hand_facts(_hand_trace(3, script_sync=True))
    assert facts.gpu["steps"] == 2
    assert facts.gpu["syncs"] == 2 and facts.gpu["sync_ops"] == {"aten::_local_scalar_dense": 2}
    finding = next(f for f in diagnose(facts) if f.id == "gpu.syncs")
    assert finding.evidence["syncs_per_step"] == 1.0


def test_the_device_s_copies_of_the_step_marks_are_not_steps():
    # Kineto also writes each step's mark on the device's timeline; the steps are the host's.
    plain, marked = (gpu_facts_of(_hand_trace(3, device_marks=flag)) for flag in (False, True))
    assert marked.steps == plain.steps == 2
    assert marked.idle_pct == pytest.approx(plain.idle_pct) == pytest.approx(100 * 6 / 18)


def gpu_facts_of(events):
    from torchboost.diagnose.gpu import gpu_facts

    return gpu_facts(events)


def test_doctor_trace_s_steps_are_the_host_s_marks():
    # The device's copies of the marks would give each step twice, and the step table with them.
    facts = _hand_facts(_hand_trace(3, device_marks=True))
    assert [s.index for s in facts.steps] == [1, 2, 3]
    assert [s.total_ms for s in facts.steps] == pytest.approx([10.0] * 3)
