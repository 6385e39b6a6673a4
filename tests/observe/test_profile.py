"""The profiler window: valid small Chrome trace, op table and sync counts."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from torchboost._intervals import difference
from torchboost.observe.probes.profile import ProfileWindow, phase_times


def _profile(tmp_path, sync: bool):
    model = torch.nn.Linear(16, 16)
    window = ProfileWindow(tmp_path / "trace.json", warmup=1, active=2)
    window.start()
    done = False
    while not done:
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
        if sync:
            loss.item()  # a host-device sync on a GPU; counted on any device
        done = window.step()
    return window


def test_trace_is_valid_chrome_json_and_small(tmp_path):
    window = _profile(tmp_path, sync=False)
    assert window.error is None and window.facts is not None
    path = tmp_path / "trace.json"
    with path.open() as fh:
        assert "traceEvents" in json.load(fh)
    assert path.stat().st_size < 3_000_000
    assert window.facts.trace_path == "trace.json"
    names = [op["name"] for op in window.facts.top_ops]
    assert "aten::addmm" in names and not any(n.startswith("ProfilerStep") for n in names)


def test_item_per_step_is_counted_as_a_sync(tmp_path):
    with_sync = _profile(tmp_path, sync=True).facts
    without = _profile(tmp_path, sync=False).facts
    assert with_sync.sync_count_per_step == 1.0
    assert without.sync_count_per_step == 0.0  # the broken twin: no item(), no sync


def test_a_profiler_that_cannot_start_fails_softly(tmp_path, monkeypatch):
    import torchboost.observe.probes.profile as profile_mod

    def refuse(*args, **kwargs):
        raise RuntimeError("profiler already in use")

    monkeypatch.setattr(profile_mod, "profile", refuse)
    window = ProfileWindow(tmp_path / "trace.json")
    window.start()
    assert window.step() is True  # over at once: the run goes on
    assert "already in use" in window.error and window.facts is None


def test_a_cuda_windows_trace_gives_the_same_gpu_facts_as_doctor_trace(tmp_path):
    import gzip
    import shutil
    from pathlib import Path

    from torchboost.diagnose.trace_file import facts_from_trace, load_traces

    recorded = Path(__file__).resolve().parents[1] / "data" / "hta" / "control.json.gz"
    trace = tmp_path / "trace.pt.trace.json"
    with gzip.open(recorded, "rb") as src, open(trace, "wb") as dst:
        shutil.copyfileobj(src, dst)
    window = ProfileWindow(trace, cuda=True)
    window.read_gpu()  # what the window does after exporting its trace on a CUDA run
    file, data = load_traces(recorded)[0]
    assert window.gpu == facts_from_trace(file, data, 0).gpu
    assert abs(window.gpu["idle_pct"] - 16.20) <= 2.0  # HTA's figure for this trace


class _Event:
    """A profiler event and its ``key_averages`` row, as far as the window reads them."""

    def __init__(self, name: str, start_us: float, end_us: float, device_type=torch.autograd.DeviceType.CPU) -> None:
        from types import SimpleNamespace

        self.name = self.key = name
        self.device_type = device_type
        self.thread, self.count = 1, 1
        self.time_range = SimpleNamespace(start=start_us, end=end_us)
        self.self_cpu_time_total, self.self_device_time_total = end_us - start_us, 0.0


class _Profiled:
    """What ``torch.profiler`` hands the window when its trace is ready, for events given by hand."""

    def __init__(self, events: list[_Event]) -> None:
        self._events = events

    def events(self) -> list[_Event]:
        return self._events

    def key_averages(self) -> list[_Event]:
        return self._events

    def export_chrome_trace(self, path: str) -> None:
        with open(path, "w") as fh:
            json.dump({"traceEvents": []}, fh)


def _two_steps(*after: _Event) -> list[_Event]:
    """Two profiled steps of 100 us, one ``.item()`` in the first and one stream sync in the second."""
    return [
        _Event("ProfilerStep*", 0.0, 100.0), _Event("aten::item", 40.0, 70.0),
        _Event("aten::_local_scalar_dense", 50.0, 60.0),
        _Event("ProfilerStep*", 100.0, 200.0), _Event("cudaStreamSynchronize", 150.0, 155.0),
        *after,
    ]


def test_the_profiler_s_own_sync_at_its_stop_is_not_counted(tmp_path):
    # torch.profiler syncs the device when it stops, after the last step: none of the script's,
    # even where Kineto's copy of the step's mark on the device's timeline still runs then.
    window = ProfileWindow(tmp_path / "trace.json", warmup=1, active=2)
    on_device = _Event("ProfilerStep*", 120.0, 230.0, device_type=torch.autograd.DeviceType.CUDA)
    window._ready(_Profiled(_two_steps(on_device, _Event("cudaDeviceSynchronize", 210.0, 215.0))))
    assert window.facts.sync_count_per_step == 1.0
    assert window.facts.sync_ops == {"aten::item": 1, "aten::_local_scalar_dense": 1, "cudaStreamSynchronize": 1}


def test_twin_a_sync_inside_a_step_is_counted(tmp_path):
    window = ProfileWindow(tmp_path / "trace.json", warmup=1, active=2)
    window._ready(_Profiled(_two_steps(_Event("cudaDeviceSynchronize", 190.0, 195.0))))
    assert window.facts.sync_count_per_step == 1.5 and window.facts.sync_ops["cudaDeviceSynchronize"] == 1


# -- the phases' wall, ops and exposed collectives ----------------------------------------------

def _event(name, start, end, *children):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), cpu_children=list(children))


def test_a_phase_s_ops_are_its_outermost_ops_and_the_rest_is_not():
    # A forward of 1000 µs whose ops take 10 (aten::linear, its addmm inside counted once, and
    # 4 µs under a range of the script's own); a backward of 300 µs, 100 of them in a
    # collective no op hides; one step of 1500 µs.
    forward = _event("torchboost: forward", 0, 1000,
                     _event("aten::linear", 100, 106, _event("aten::addmm", 101, 105)),
                     _event("DistributedDataParallel.forward", 200, 900, _event("aten::relu", 300, 304)))
    backward = _event("torchboost: backward", 1000, 1300,
                      _event("autograd::engine::evaluate_function: AddmmBackward0", 1000, 1150))
    step = _event("ProfilerStep#1", 0, 1500, _event("torchboost: step 3", 0, 1500, forward, backward))
    phases = phase_times([step, forward, backward, *step.cpu_children], 1, exposed=[(1150, 1250), (1400, 1450)])
    assert phases["forward"] == {"wall_ms": 1.0, "op_ms": pytest.approx(0.010), "collective_ms": 0.0}
    assert phases["backward"] == {"wall_ms": 0.3, "op_ms": pytest.approx(0.15), "collective_ms": pytest.approx(0.1)}
    assert phases["step"] == {"wall_ms": 1.5, "op_ms": pytest.approx(0.16), "collective_ms": pytest.approx(0.15)}
    assert "data" not in phases  # no phase mark, no entry


def test_twin_no_step_marked_gives_no_phases():
    forward = _event("torchboost: forward", 0, 1000, _event("aten::linear", 100, 106))
    assert phase_times([forward], 1, exposed=[]) == {}


def test_compiled_code_counts_as_ops():
    forward = _event("torchboost: forward", 0, 100, _event("Torch-Compiled Region: 0/0", 10, 90,
                                                           _event("CompiledFunction", 11, 89)))
    assert phase_times([_event("ProfilerStep#1", 0, 100, forward), forward], 1, [])["forward"]["op_ms"] == \
        pytest.approx(0.08)


def test_a_real_window_gives_each_marked_phase_its_ops(tmp_path):
    model = torch.nn.Linear(16, 16)
    window = ProfileWindow(tmp_path / "trace.json", warmup=1, active=2)
    window.start()
    done = False
    while not done:
        window.annotate("torchboost: forward")
        loss = model(torch.randn(8, 16)).pow(2).mean()
        window.end_annotation()
        window.annotate("torchboost: backward")
        loss.backward()
        window.end_annotation()
        done = window.step()
    phases = window.facts.phases
    assert set(phases) == {"step", "forward", "backward"}
    for times in phases.values():
        assert 0 < times["op_ms"] <= times["wall_ms"] and times["collective_ms"] == 0.0


def test_difference_of_intervals():
    assert difference([(0, 10), (20, 30)], [(2, 3), (5, 22), (29, 40)]) == [(0, 2), (3, 5), (22, 29)]
    assert difference([(0, 10)], []) == [(0, 10)] and difference([], [(0, 1)]) == []


_HTA_DATA = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "hta"
_ON_DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def _launchers(events: list[dict]) -> dict[int, str]:
    """The innermost host op (or record_function range) around each CUDA runtime call, by
    the call's correlation id: the op torch's profiler gives the launched kernel's time to."""
    found: dict[int, str] = {}
    host = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime")]
    for tid in {e.get("tid") for e in host}:
        stack: list[dict] = []
        for e in sorted((e for e in host if e.get("tid") == tid), key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if e["cat"] == "cuda_runtime":
                if stack and "correlation" in e.get("args", {}):
                    found[e["args"]["correlation"]] = stack[-1]["name"]
            else:
                stack.append(e)
    return found


def _key_averages(trace: dict) -> list[SimpleNamespace]:
    """``prof.key_averages()`` of a recorded Kineto trace, as torch builds it: each op of the
    host (and each record_function range) a CPU row whose self device time is the kernels it
    launched itself; each kernel, copy and memset a CUDA row of its own."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    launchers = _launchers(events)
    rows: dict[tuple[str, object], SimpleNamespace] = {}

    def row(name: str, device_type) -> SimpleNamespace:
        return rows.setdefault((name, device_type), SimpleNamespace(
            key=name, count=0, self_cpu_time_total=0.0, self_device_time_total=0.0, device_type=device_type))

    for e in events:
        if e.get("cat") in ("cpu_op", "user_annotation"):
            found = row(e["name"], torch.autograd.DeviceType.CPU)
            found.count += 1
            found.self_cpu_time_total += float(e["dur"])  # self or not: the device time is what is held here
        elif e.get("cat") in _ON_DEVICE:
            kernel = row(e["name"], torch.autograd.DeviceType.CUDA)
            kernel.count += 1
            kernel.self_device_time_total += float(e["dur"])
            launcher = launchers.get(e.get("args", {}).get("correlation"))
            if launcher is not None:
                row(launcher, torch.autograd.DeviceType.CPU).self_device_time_total += float(e["dur"])
    return list(rows.values())


def _hta_device_ms(trace: dict) -> float:
    """HTA's GPU time of a trace: its kernels', copies' and memsets' durations, each once
    (the total of ``get_gpu_kernel_breakdown``'s computation, communication and memory)."""
    return sum(float(e["dur"]) for e in trace["traceEvents"] if e.get("cat") in _ON_DEVICE) / 1000.0


@pytest.mark.parametrize("name", ["alexnet_a100.json.gz", "control.json.gz", "negative_queue_rank0.json.gz"])
def test_the_op_table_counts_each_gpu_microsecond_once_as_hta_does(name):
    from torchboost.diagnose.trace_file import load_traces
    from torchboost.observe.probes.profile import summarize_events

    _, trace = load_traces(_HTA_DATA / name)[0]
    table = summarize_events(_key_averages(trace), steps=1, top=10**6).top_ops
    assert sum(op["self_device_ms"] for op in table) == pytest.approx(_hta_device_ms(trace), rel=1e-6)
    assert all(op["name"] not in {e["name"] for e in trace["traceEvents"] if e.get("cat") == "kernel"}
               for op in table)  # no kernel row beside the op that launched it


@pytest.mark.parametrize("name", ["alexnet_a100.json.gz", "control.json.gz"])
def test_twin_the_rows_as_torch_gives_them_count_the_launched_kernels_twice(name):
    from torchboost.diagnose.trace_file import load_traces

    _, trace = load_traces(_HTA_DATA / name)[0]
    every_row_ms = sum(r.self_device_time_total for r in _key_averages(trace)) / 1000.0
    assert every_row_ms > 1.9 * _hta_device_ms(trace)


@pytest.mark.parametrize("cap, read", [(10, False), (1_000_000, True)])
def test_a_window_of_more_operations_than_torchboost_reads_is_left_unread(tmp_path, monkeypatch, cap, read):
    # A 5 s step of tiny operations held 2 million in two steps: a 515 MB trace whose reading
    # outlasted the bound on torchboost's own work. Over the cap (here 10), the window is
    # neither read nor written, and says why; twin: under it, read and written as before.
    monkeypatch.setattr("torchboost.observe.probes.profile.MAX_READ_EVENTS", cap)
    window = _profile(tmp_path, sync=False)
    assert (window.facts is not None) is read and (tmp_path / "trace.json").exists() is read
    assert (window.error is None) is read
    if not read:
        assert "more than the 10 torchboost reads" in window.error and "no op table and no trace" in window.error


@pytest.mark.parametrize("error", ["the profiler recorded 1,915,474 operations in its 2 step(s), more than ...", None])
def test_a_window_left_unread_is_said_in_the_doctors_notes(error):
    # The profiler's error reached facts.json and no report: the doctor's notes say it now.
    # Twin: a window without one adds no such note.
    from torchboost.evidence.observed import Facts
    from torchboost.evidence.steps import summarize
    from torchboost.report.doctor_report import run_notes

    facts = Facts()
    facts.profile_error = error
    said = [n for n in run_notes(facts, summarize(facts), []) if n.startswith("The profiler:")]
    assert said == ([f"The profiler: {error}."] if error else [])
