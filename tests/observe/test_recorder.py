"""Step accounting with a fake clock: stages, what is recorded, when the run stops."""

from __future__ import annotations

import json

import pytest

from torchboost.evidence.observed import Facts
from torchboost.observe import ObserveSpec, StepRecorder, StopObserving
from torchboost.observe.record.recorder import BACKWARD, DATA, FORWARD

from _fake_cuda import FakeCuda


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _recorder(tmp_path, **kw):
    clock = _Clock()
    kw.setdefault("profile_active", 0)
    spec = ObserveSpec(out_dir=str(tmp_path), progress_path=str(tmp_path / "progress.json"), **kw)
    return StepRecorder(spec, clock=clock), clock


def _step(rec, clock, data_ms=3.0, fwd_ms=2.0, bwd_ms=4.0, extra_ms=1.0):
    rec.phase_end(DATA, data_ms)
    rec.phase_end(FORWARD, fwd_ms)
    rec.phase_end(BACKWARD, bwd_ms)
    clock.now += (data_ms + fwd_ms + bwd_ms + extra_ms) / 1000.0
    rec.backward_done()


def test_warmup_is_skipped_and_the_run_stops_after_the_steps(tmp_path):
    rec, clock = _recorder(tmp_path, steps=3, warmup=2)
    for _ in range(4):
        _step(rec, clock)
    with pytest.raises(StopObserving):
        _step(rec, clock)
    facts = rec.facts()
    assert [s.index for s in facts.steps] == [2, 3, 4]
    step = facts.steps[0]
    assert step.total_ms == pytest.approx(10.0)
    assert (step.data_ms, step.forward_ms, step.backward_ms) == (3.0, 2.0, 4.0)
    assert step.other_ms == pytest.approx(1.0)
    assert facts.ended == "stopped" and facts.step_source == "backward"


def test_full_run_keeps_recording_and_never_stops(tmp_path):
    rec, clock = _recorder(tmp_path, steps=2, warmup=1, full=True)
    for _ in range(10):
        _step(rec, clock)
    assert len(rec.facts().steps) == 9 and rec.facts().target_steps is None


def test_facts_file_is_written_as_the_steps_double_then_at_the_end(tmp_path):
    """Written at 1, 2, 4, ... recorded steps: a run killed by SIGKILL, where nothing of the
    observer runs after, keeps at least half of what was recorded. Twin: not after every step."""
    rec, clock = _recorder(tmp_path, steps=6, warmup=0, flush_interval_s=1e9)

    def written() -> Facts:
        return Facts.from_dict(json.loads((tmp_path / "facts.json").read_text()))

    kept = []
    for _ in range(5):
        _step(rec, clock)
        kept.append(len(written().steps))
    assert kept == [1, 2, 2, 4, 4]  # a crash from the first step on keeps what was seen, half at least
    with pytest.raises(StopObserving):
        _step(rec, clock)
    assert len(written().steps) == 6 and written().steps[5].index == 5


def test_facts_file_is_rewritten_every_flush_interval_between_doublings(tmp_path):
    rec, clock = _recorder(tmp_path, steps=8, warmup=0, flush_interval_s=5.0)

    def written() -> Facts:
        return Facts.from_dict(json.loads((tmp_path / "facts.json").read_text()))

    for _ in range(4):
        _step(rec, clock)
    _step(rec, clock)
    assert len(written().steps) == 4  # the fifth: no doubling, no interval yet
    clock.now += 6.0
    _step(rec, clock)
    assert len(written().steps) == 6  # the interval passed


def test_progress_file_says_the_stage(tmp_path):
    rec, clock = _recorder(tmp_path, steps=5, warmup=2)
    _step(rec, clock)
    assert json.loads((tmp_path / "progress.json").read_text()) == {"stage": "warm-up", "step": 1, "of": 2}
    _step(rec, clock)
    _step(rec, clock)
    clock.now += 1.0  # past the progress throttle
    _step(rec, clock)
    assert json.loads((tmp_path / "progress.json").read_text()) == {"stage": "observing", "step": 2, "of": 5}


def test_observer_failures_are_recorded_not_raised(tmp_path):
    rec, clock = _recorder(tmp_path, steps=2, warmup=1)

    class BadLoader:  # describe_loader reads attributes this lacks
        pass

    rec.loader_iter(BadLoader(), object())
    _step(rec, clock)
    assert rec.errors and "AttributeError" in rec.errors[0]


def test_cuda_started_by_our_probe_does_not_make_a_cpu_run_a_gpu_one(tmp_path, monkeypatch):
    import torch

    import torchboost.env

    state = {"cuda": False}
    real_probe = torchboost.env.probe

    def probe_that_starts_cuda():
        state["cuda"] = True  # as get_device_properties does on a GPU machine
        return real_probe()

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: state["cuda"])
    monkeypatch.setattr(torchboost.env, "probe", probe_that_starts_cuda)
    rec, clock = _recorder(tmp_path, steps=3, warmup=1)
    _step(rec, clock)  # end of warm-up: the probe runs here
    assert state["cuda"] and not rec._uses_cuda()

    # The twin: CUDA started by the script itself is a GPU run.
    other, _ = _recorder(tmp_path, steps=3, warmup=1)
    assert other._uses_cuda()


def test_first_step_time_stays_in_the_warmup_when_the_optimizer_is_adopted(tmp_path):
    # A model compiled before training (through a Booster) compiles in its first forward,
    # which comes before the optimizer's first step: that time must reach the warm-up
    # record the tuner weighs compile against, not vanish with the cut-in-two first step.
    import torch

    from torchboost.tune.trials.trial import result_from_facts

    rec, clock = _recorder(tmp_path, steps=3, warmup=2)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    clock.now = 5.0  # the script's own setup before training: not part of any step
    rec.forward_begin(model, ())
    clock.now += 0.5  # the first forward compiles for 500 ms
    rec.backward_done()
    for _ in range(6):
        rec.optimizer_begin(optimizer)
        clock.now += 0.010
        try:
            rec.optimizer_done(optimizer)
        except StopObserving:
            break
        rec.forward_begin(model, ())
    facts = rec.facts()
    assert facts.step_source == "optimizer"
    assert facts.warmup_step_ms[0] == pytest.approx(500.0)  # setup time excluded, compile kept
    assert len(facts.steps) == 3
    compile_s = result_from_facts(facts, {}, 0, exit_code=0).compile_s
    assert compile_s == pytest.approx(0.49, abs=0.01)


def test_a_trial_far_slower_than_its_bound_stops_after_five_steps(tmp_path):
    rec, clock = _recorder(tmp_path, steps=30, warmup=1, stop_slower_than_ms=5.0)
    _step(rec, clock)  # warm-up
    with pytest.raises(StopObserving):
        for _ in range(30):
            _step(rec, clock)  # 10 ms each, over the 5 ms bound
    assert len(rec.steps) == 5 and rec.stopped_slow and rec.facts().stopped_slow


def test_a_rank_of_a_job_runs_its_planned_steps_however_slow(tmp_path, monkeypatch):
    # Each rank would decide its early stop on its own steps, and one stopping a step before
    # another leaves that one waiting in its next collective: ranks stop at the planned end.
    # The twin is the trial above, a single process, stopped after five steps.
    from torchboost.observe.record import recorder

    monkeypatch.setattr(recorder, "one_rank_of_many", lambda: True)
    rec, clock = _recorder(tmp_path, steps=12, warmup=1, stop_slower_than_ms=5.0)
    _step(rec, clock)  # warm-up
    with pytest.raises(StopObserving):
        for _ in range(30):
            _step(rec, clock)  # 10 ms each, over the 5 ms bound
    assert len(rec.steps) == 12 and not rec.stopped_slow


def test_one_recompile_among_the_first_steps_does_not_stop_a_trial(tmp_path):
    # A compiled candidate's first recorded steps: a recompile (200 ms) then its pace (10 ms).
    # Their mean (48 ms) is over the 20 ms bound, their median is not.
    rec, clock = _recorder(tmp_path, steps=8, warmup=1, stop_slower_than_ms=20.0)
    _step(rec, clock)  # warm-up
    _step(rec, clock, fwd_ms=192.0)
    with pytest.raises(StopObserving):
        for _ in range(20):
            _step(rec, clock)
    assert len(rec.steps) == 8 and not rec.stopped_slow


def test_a_trial_within_its_bound_runs_all_its_steps(tmp_path):
    rec, clock = _recorder(tmp_path, steps=8, warmup=1, stop_slower_than_ms=50.0)
    with pytest.raises(StopObserving):
        for _ in range(20):
            _step(rec, clock)
    assert len(rec.steps) == 8 and not rec.stopped_slow  # the twin: stopped at its planned end


@pytest.mark.parametrize("steps_before_adoption", [1, 4])
def test_the_first_steps_loss_stays_step_0_when_the_optimizer_is_adopted(tmp_path, steps_before_adoption):
    # The first optimizer step's backward comes before the optimizer is seen: its loss is
    # the script's step 0 (under accumulation by 4, the last micro-batch's, as every step's).
    import torch

    rec, clock = _recorder(tmp_path, steps=3, warmup=2)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    try:
        while True:
            for micro in range(steps_before_adoption if step == 0 else 1):
                rec.backward_tensor(torch.tensor(float(10 * step + micro)))
                rec.backward_done()
            rec.optimizer_begin(optimizer)
            clock.now += 0.01
            rec.optimizer_done(optimizer)
            step += 1
    except StopObserving:
        pass
    facts = rec.facts()
    assert [*facts.warmup_losses, *facts.losses] == [float(steps_before_adoption - 1), 10.0, 20.0, 30.0, 40.0]
    assert facts.loss_steps == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("record_s, recorded", [(0.5, 6), (None, 20)])
def test_a_time_bound_ends_recording_once_its_steps_fill_it(tmp_path, record_s, recorded):
    """Steps of 100 ms and a bound of 0.5 s: recording ends after the six steps it takes at
    least (0.6 s), and the run stops there, its target the steps it recorded. Twin: no bound,
    all twenty steps."""
    rec, clock = _recorder(tmp_path, steps=20, warmup=1, record_s=record_s)
    with pytest.raises(StopObserving):
        for _ in range(30):
            _step(rec, clock, data_ms=10.0, fwd_ms=40.0, bwd_ms=40.0, extra_ms=10.0)
    facts = rec.facts()
    assert len(facts.steps) == recorded and facts.target_steps == recorded
    assert facts.other_load_pct is not None and 0.0 <= facts.other_load_pct <= 100.0


def test_a_time_bound_is_none_or_positive(tmp_path):
    with pytest.raises(ValueError, match="record_s"):
        ObserveSpec(out_dir=str(tmp_path), record_s=0.0)


@pytest.mark.parametrize("precision, recorded", [(0.05, 6), (None, 20)])
def test_recording_ends_once_the_median_step_is_known(tmp_path, precision, recorded):
    """Steady steps of a second: after six (and 5 s) the median is known within 5%, and
    recording ends there, saying why. Twin: without a precision, all twenty."""
    rec, clock = _recorder(tmp_path, steps=20, warmup=1, precision=precision)
    with pytest.raises(StopObserving):
        for _ in range(30):
            _step(rec, clock, data_ms=100.0, fwd_ms=400.0, bwd_ms=400.0, extra_ms=100.0)
    facts = rec.facts()
    assert len(facts.steps) == recorded
    assert ("the median step known within" in facts.recording_ended) is (precision is not None)


def test_twin_fast_steps_keep_every_step_asked_for(tmp_path):
    """10 ms steps known within 5% after six: their 60 ms are far under the 5 s after which
    precision may end recording, so all twenty are recorded for the phase table."""
    rec, clock = _recorder(tmp_path, steps=20, warmup=1, precision=0.05)
    with pytest.raises(StopObserving):
        for _ in range(30):
            _step(rec, clock)
    assert len(rec.facts().steps) == 20


@pytest.mark.parametrize("first_ms, settled_at", [(2000.0, 2), (9000.0, 3)])
def test_warm_up_ends_once_its_steps_settle(tmp_path, first_ms, settled_at):
    """Second-long steps: warm-up ends at its second step when that one is within 25% of the
    first (2 s then 1.9 s), at its third when the first carried a compile (9 s). Twin below."""
    rec, clock = _recorder(tmp_path, steps=3, warmup=5, settle_warmup=True)
    times = [first_ms, 1900.0, 1900.0, 1900.0, 1900.0, 1900.0, 1900.0, 1900.0]
    with pytest.raises(StopObserving):
        for ms in times:
            _step(rec, clock, data_ms=0.0, fwd_ms=ms / 2, bwd_ms=ms / 2, extra_ms=0.0)
    facts = rec.facts()
    assert facts.warmup_steps == settled_at and len(facts.steps) == 3
    assert [s.index for s in facts.steps] == [settled_at, settled_at + 1, settled_at + 2]


def test_twin_warm_up_keeps_its_count_without_settling_or_on_fast_steps(tmp_path):
    for kw, ms in (({"settle_warmup": False}, 1900.0), ({"settle_warmup": True}, 10.0)):
        rec, clock = _recorder(tmp_path, steps=3, warmup=5, **kw)
        with pytest.raises(StopObserving):
            for _ in range(10):
                _step(rec, clock, data_ms=0.0, fwd_ms=ms / 2, bwd_ms=ms / 2, extra_ms=0.0)
        assert rec.facts().warmup_steps == 5


def _on_fake_cuda(rec, clock, monkeypatch) -> FakeCuda:
    """``rec`` on CUDA, faked: each sync notes whether the profiler was recording then. The
    profiler itself records the host only (this machine's torch has no CUDA activity)."""
    from torchboost.observe.probes.profile import ProfileWindow

    start = ProfileWindow.start

    def host_only(window):
        window.cuda = False
        start(window)

    monkeypatch.setattr(ProfileWindow, "start", host_only)
    monkeypatch.setattr(rec.built, "uses_cuda", lambda: True)
    return FakeCuda(lambda: clock.now * 1000.0, on_sync=lambda: rec.stages.profile.running).install(monkeypatch)


def _timed_step(rec, clock, ms=(0.0, 2.0, 4.0)):
    for phase, phase_ms in zip((DATA, FORWARD, BACKWARD), ms):
        rec.phase_begin(phase)
        clock.now += phase_ms / 1000.0
        rec.phase_end(phase, phase_ms)
    clock.now += 0.001
    rec.backward_done()


def test_the_observer_never_syncs_the_device_inside_the_profiler_window(tmp_path, monkeypatch):
    # The profiled steps are in no recorded figure: a sync of ours at their boundaries would
    # only show in the trace as the script's (gpu.syncs, sync.host_device) and drain the
    # device each step (gpu.idle). Recorded steps still end in one, their device times with it.
    rec, clock = _recorder(tmp_path, steps=3, warmup=1, profile_warmup=1, profile_active=2)
    cuda = _on_fake_cuda(rec, clock, monkeypatch)
    with pytest.raises(StopObserving):
        # Quick probes follow the window: on a machine other processes keep busy, the
        # threads switch among them, for more steps than a quiet machine's 20.
        for _ in range(400):
            _timed_step(rec, clock)
    assert rec.stages.profile.facts is not None and rec.stages.profile.facts.steps == 2  # the window ran
    assert cuda.syncs and True not in cuda.syncs
    assert [s.forward_ms for s in rec.steps] == pytest.approx([2.0] * 3)
    assert [s.backward_ms for s in rec.steps] == pytest.approx([4.0] * 3)


def test_a_step_timed_on_the_device_starts_on_a_drained_device(tmp_path, monkeypatch):
    # After steps not timed on the device (the first, the profiled ones) the device may still
    # run their work: the next timed step waits for it first, so it is not counted in that step.
    rec, clock = _recorder(tmp_path, steps=3, warmup=1)
    cuda = _on_fake_cuda(rec, clock, monkeypatch)
    _timed_step(rec, clock)  # the first step, untimed: no sync at its end...
    assert len(cuda.syncs) == 1  # ...but one before the second starts
    _timed_step(rec, clock)
    assert len(cuda.syncs) == 2  # a timed step's own, at its boundary; none more


def _observe_on_cuda(rec, *, until=lambda: False, steps=60, device="cuda"):
    """A tiny training loop on the GPU, observed in-process by ``rec`` as the doctor's child
    observes a script, until ``until()``: no sync of its own (no ``.item()``, batches made
    on the device)."""
    import torch
    import torch.nn.functional as F

    from torchboost.observe import Instrumentation

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(256, 512, device=device), torch.randint(0, 10, (256,), device=device)
    with Instrumentation(rec):
        try:
            for _ in range(steps):
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
                if until():
                    break
        except StopObserving:
            pass


@pytest.mark.gpu
def test_on_cuda_the_phases_device_times_fit_in_their_step(tmp_path):
    rec = StepRecorder(ObserveSpec(out_dir=str(tmp_path), steps=5, warmup=2, profile_active=0))
    _observe_on_cuda(rec)
    assert len(rec.steps) == 5 and rec.built.uses_cuda()
    for step in rec.steps:
        assert step.forward_ms > 0 and step.backward_ms > 0 and step.optimizer_ms > 0
        assert step.data_ms + step.forward_ms + step.backward_ms + step.optimizer_ms <= step.total_ms


@pytest.mark.gpu
def test_on_cuda_a_script_that_never_syncs_shows_no_sync_in_its_profile(tmp_path):
    # The doctor's window (one profiler warm-up step, two active), read as the doctor reads it;
    # a full run, so that no quick probe follows the window (the loop ends with it).
    spec = ObserveSpec(out_dir=str(tmp_path), steps=3, warmup=2, profile_warmup=1, profile_active=2, full=True)
    rec = StepRecorder(spec)
    _observe_on_cuda(rec, until=lambda: rec.stages.profile.facts is not None)
    window = rec.stages.profile
    assert window.error is None and window.facts is not None and window.gpu is not None
    assert window.gpu["kernels"] > 0 and window.gpu["steps"] >= 1
    assert window.gpu["syncs"] == 0, window.gpu["sync_ops"]
    assert window.facts.sync_count_per_step == 0.0, window.facts.sync_ops
