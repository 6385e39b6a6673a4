"""The profiler window: valid small Chrome trace, op table and sync counts."""

from __future__ import annotations

import json

import torch

from torchboost.observe.probes.profile import ProfileWindow


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
