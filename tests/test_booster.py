"""The Booster against plain PyTorch loops written without torchboost."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchboost
from torchboost import BoostConfig
from torchboost.checkpoint import CheckpointError
from torchboost.plan import Plan

STEPS = 20


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


class _SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()
        )
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def _data(kind: str) -> TensorDataset:
    g = torch.Generator().manual_seed(1)
    n = 64
    x = torch.randn(n, 16, generator=g) if kind == "mlp" else torch.randn(n, 3, 8, 8, generator=g)
    return TensorDataset(x, torch.randint(0, 4, (n,), generator=g))


def _setup(kind: str, lr: float = 0.05):
    torch.manual_seed(0)
    model = _mlp() if kind == "mlp" else _SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loader = DataLoader(_data(kind), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(2))
    return model, optimizer, loader


def _plain_loop(kind: str, lr: float = 0.05) -> nn.Module:
    """The reference: a plain PyTorch loop, no torchboost."""
    model, optimizer, loader = _setup(kind, lr)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    while step < STEPS:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == STEPS:
                break
    return model


def _booster_loop(kind: str, config: BoostConfig) -> nn.Module:
    model, optimizer, loader = _setup(kind)
    booster = torchboost.Booster(config, device="cpu", verbose=False)
    model, optimizer, loader = booster.prepare(model, optimizer, loader)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    while step < STEPS:
        for x, y in loader:
            with booster.autocast():
                loss = loss_fn(model(x), y)
            booster.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == STEPS:
                break
    return model


def _assert_bitwise(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), f"{key} differs"


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_off_is_plain_pytorch_bit_for_bit(kind):
    threads = torch.get_num_threads()
    _assert_bitwise(_booster_loop(kind, BoostConfig.off()), _plain_loop(kind))
    assert torch.get_num_threads() == threads  # "off" touched no process-wide setting


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_parity_check_catches_a_tiny_difference(kind):
    """The broken twin: a loop whose learning rate differs in the 7th digit must not pass."""
    with pytest.raises(AssertionError, match="differs"):
        _assert_bitwise(_booster_loop(kind, BoostConfig.off()), _plain_loop(kind, lr=0.05 * (1 + 1e-6)))


def test_prepare_returns_what_was_given_in_order():
    model, optimizer, loader = _setup("mlp")
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    out = booster.prepare(model, optimizer, loader, scheduler)
    assert len(out) == 4 and out[0] is model
    assert isinstance(out[1], torch.optim.Optimizer)
    assert len(out[2]) == len(loader)
    assert len(booster.prepare(*_setup("mlp")[:2])) == 2


def test_using_the_booster_before_prepare_says_what_to_do():
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    with pytest.raises(RuntimeError, match="prepare"):
        booster.autocast()


def fields_without_their_reason(resolved) -> list[str]:
    """The fields "auto" left to the Booster whose resolved reason is missing, empty or the
    default "as configured", or whose summary line does not end with it."""
    lines = resolved.summary().splitlines()
    missing = []
    for name, value in ((f"{s}.{k}", v) for s, values in BoostConfig().to_dict().items() for k, v in values.items()):
        if value != "auto":
            continue
        reason = resolved.reasons.get(name, "")
        line = next((line for line in lines if line.split()[:1] == [name]), "")
        if not reason.strip() or reason == "as configured" or not line.endswith(reason):
            missing.append(name)
    return missing


def test_summary_gives_a_reason_for_every_field():
    booster = torchboost.Booster(BoostConfig(), device="cpu", verbose=False)
    booster.prepare(*_setup("mlp"))
    assert fields_without_their_reason(booster.resolved) == []
    assert "auto" not in [row[1] for row in booster.resolved.rows()]


def test_twin_a_field_resolved_without_its_reason_is_named():
    import dataclasses

    booster = torchboost.Booster(BoostConfig(), device="cpu", verbose=False)
    booster.prepare(*_setup("mlp"))
    reasons = {k: v for k, v in booster.resolved.reasons.items() if k != "precision.mode"}
    assert fields_without_their_reason(dataclasses.replace(booster.resolved, reasons=reasons)) == ["precision.mode"]


def test_config_file_in_cwd_is_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    BoostConfig.off().replace(precision={"mode": "bf16"}).to_toml("torchboost.toml")
    assert torchboost.Booster(verbose=False).config.precision.mode == "bf16"
    (tmp_path / "torchboost.toml").unlink()
    assert torchboost.Booster(verbose=False).config == BoostConfig()


# -- fp16 overflow through the Booster: skipped step, scheduler held ------------------------


def test_fp16_overflow_skips_the_step_and_holds_the_scheduler():
    model, optimizer, loader = _setup("mlp")
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    config = BoostConfig.off().replace(precision={"mode": "fp16"})
    booster = torchboost.Booster(config, device="cpu", verbose=False)
    model, optimizer, loader, scheduler = booster.prepare(model, optimizer, loader, scheduler)
    loss_fn = nn.CrossEntropyLoss()
    skipped_at = 3
    lrs, skipped = [], []
    for i, (x, y) in enumerate(loader):
        with booster.autocast():
            loss = loss_fn(model(x), y)
        if i == skipped_at:
            loss = loss * float("inf")
        booster.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        skipped.append(booster.step_was_skipped)
        lrs.append(optimizer.param_groups[0]["lr"])
    assert skipped == [i == skipped_at for i in range(len(loader))]
    assert lrs[skipped_at] == lrs[skipped_at - 1]  # no advance on the skipped step
    assert lrs[skipped_at + 1] == lrs[skipped_at] * 0.5
    assert scheduler.last_epoch == len(loader) - 1 == optimizer.real_steps
    assert all(torch.isfinite(p).all() for p in model.parameters())


# -- checkpoints ----------------------------------------------------------------------------


def _fp16_run(booster: torchboost.Booster, model, optimizer, loader, steps: int, skip=None):
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for i, (x, y) in enumerate(loader):
        if i == steps:
            break
        with booster.autocast():
            loss = loss_fn(model(x), y)
        if skip == i:
            loss = loss * float("inf")
        booster.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_checkpoint_round_trip_is_bitwise_scaler_included(tmp_path):
    config = BoostConfig.off().replace(precision={"mode": "fp16"})
    booster = torchboost.Booster(config, device="cpu", verbose=False)
    model, optimizer, loader = booster.prepare(*_setup("mlp"))
    _fp16_run(booster, model, optimizer, loader, steps=5, skip=2)
    path = tmp_path / "ckpt.pt"
    booster.save(path, model=model, optimizer=optimizer, epoch=3, note="hello")
    scale = booster.precision.state_dict()["scale"]
    assert scale < 2.0**16  # the skip halved it, so a restored default would differ

    fresh = torchboost.Booster(config, device="cpu", verbose=False)
    model2, optimizer2, loader2 = fresh.prepare(*_setup("mlp"))
    extra = fresh.load(path, model=model2, optimizer=optimizer2)
    assert extra == {"epoch": 3, "note": "hello"}
    _assert_bitwise(model, model2)
    assert fresh.precision.state_dict() == booster.precision.state_dict()
    assert optimizer2.real_steps == optimizer.real_steps == 4

    # Both continue identically on the same batches.
    batches = list(DataLoader(_data("mlp"), batch_size=8))
    a = _fp16_run(booster, model, optimizer, batches, steps=4)
    b = _fp16_run(fresh, model2, optimizer2, batches, steps=4)
    assert a == b
    _assert_bitwise(model, model2)


def test_checkpoint_without_scaler_state_would_diverge(tmp_path):
    """Broken twin: restoring weights but not the scaler leaves a different scale."""
    config = BoostConfig.off().replace(precision={"mode": "fp16"})
    booster = torchboost.Booster(config, device="cpu", verbose=False)
    model, optimizer, loader = booster.prepare(*_setup("mlp"))
    _fp16_run(booster, model, optimizer, loader, steps=5, skip=2)
    path = tmp_path / "ckpt.pt"
    booster.save(path, model=model, optimizer=optimizer)
    state = torch.load(path, weights_only=True)
    del state["precision"]
    torch.save(state, path)
    fresh = torchboost.Booster(config, device="cpu", verbose=False)
    model2, optimizer2, _ = fresh.prepare(*_setup("mlp"))
    fresh.load(path, model=model2, optimizer=optimizer2)
    assert fresh.precision.state_dict() != booster.precision.state_dict()


class _Payload:
    """Unpickling this creates a file: what a malicious checkpoint would do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_malicious_checkpoint_is_refused_and_runs_nothing(tmp_path):
    victim = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "extra": _Payload(str(victim))}, path)
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    with pytest.raises(CheckpointError, match="refused"):
        booster.load(path)
    assert not victim.exists()
    # The payload is real: an unsafe load would have created the file.
    torch.load(path, weights_only=False)
    assert victim.exists()


def test_missing_checkpoint_and_missing_state_are_clear(tmp_path):
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        booster.load(tmp_path / "nope.pt")
    model, optimizer, _ = booster.prepare(*_setup("mlp"))
    booster.save(tmp_path / "m.pt", model=model)
    with pytest.raises(CheckpointError, match="no optimizer state"):
        booster.load(tmp_path / "m.pt", model=copy.deepcopy(model), optimizer=optimizer)


def test_interrupted_checkpoint_write_keeps_the_previous(tmp_path, monkeypatch):
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    model, optimizer, _ = booster.prepare(*_setup("mlp"))
    path = tmp_path / "ckpt.pt"
    booster.save(path, model=model)
    before = path.read_bytes()

    def failing_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        booster.save(path, model=model, optimizer=optimizer)
    assert path.read_bytes() == before


def test_a_tuning_trial_hands_its_settings_to_the_booster(tmp_path, monkeypatch):
    from torchboost import handover as trial

    settings = tmp_path / "trial.json"
    # the trial's whole configuration: the candidate on top of plain PyTorch (no torchboost.toml)
    trial.write_plan(settings, Plan.of(torchboost.Overlay({"precision.mode": "bf16", "loader.num_workers": 0})
                                       .on(BoostConfig.off())))
    monkeypatch.setenv(trial.TRIAL_SETTINGS_ENV, str(settings))
    own = BoostConfig().replace(compile={"mode": "default"})  # the script's own config
    booster = torchboost.Booster(own, device="cpu", verbose=False)
    assert booster.config.precision.mode == "bf16"
    assert booster.config.loader.num_workers == 0
    # The rest is plain PyTorch, as tune would write it: what is measured is what is written.
    assert booster.config.compile == BoostConfig.off().compile
    assert booster.config.optimizer == BoostConfig.off().optimizer
    baseline = tmp_path / "baseline.json"  # a trial's process reads its plan once: another trial, another file
    trial.write_plan(baseline, Plan.of(BoostConfig.off()))
    monkeypatch.setenv(trial.TRIAL_SETTINGS_ENV, str(baseline))
    assert torchboost.Booster(own, device="cpu", verbose=False).config == BoostConfig.off()
    monkeypatch.delenv(trial.TRIAL_SETTINGS_ENV)
    assert torchboost.Booster(own, device="cpu", verbose=False).config == own


def test_a_sequential_schedule_still_drives_the_optimizer_after_prepare():
    def run(boosted: bool) -> list[float]:
        model, optimizer, loader = _setup("mlp")
        schedule = torch.optim.lr_scheduler.SequentialLR(
            optimizer,
            [torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=3),
             torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0, total_iters=1)],
            milestones=[3],
        )
        if boosted:
            config = BoostConfig.off().replace(optimizer={"implementation": "fused"})
            booster = torchboost.Booster(config, device="cpu", verbose=False)
            model, optimizer, loader, schedule = booster.prepare(model, optimizer, loader, schedule)
        lrs = []
        for x, y in loader:
            nn.CrossEntropyLoss()(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            schedule.step()
            lrs.append(optimizer.param_groups[0]["lr"])
        assert optimizer.param_groups[0]["fused"] is (True if boosted else None)
        return lrs

    plain = run(False)
    assert plain[-1] == pytest.approx(0.05) and plain[0] < 0.05  # the warm-up really ramps
    assert run(True) == plain
