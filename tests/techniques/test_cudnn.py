"""cudnn.benchmark: its section, "auto" on CUDA only with fixed shapes, inert on CPU, and each path
(Booster, no-code applier, tuner) reaching it through the technique registry."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torchboost
from torchboost import BoostConfig, ConfigError, Overlay
from torchboost.nocode import Applier
from torchboost.plan import Plan, nocode_settings
from torchboost.techniques.cudnn import CudnnConfig, fixed_shapes, resolve_benchmark
from torchboost.techniques.memory import MemoryTuning
from torchboost.tune.search.levers import TuneContext, default_levers

CONV = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(2))
MLP = nn.Sequential(nn.Linear(8, 2))


def _loader(n: int, batch: int, *, drop_last: bool = False) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(n, 3, 8, 8), torch.randint(0, 2, (n,))), batch_size=batch,
                      drop_last=drop_last)


@pytest.fixture
def benchmark_flag():
    """Restore torch's flag after each test: it is process-wide."""
    before = torch.backends.cudnn.benchmark
    yield
    torch.backends.cudnn.benchmark = before


def test_config_section_validates_and_round_trips(tmp_path):
    with pytest.raises(ConfigError, match=r"cudnn\.benchmark: expected auto \| keep \| true \| false"):
        CudnnConfig(benchmark="yes")
    config = BoostConfig.from_dict({"cudnn": {"benchmark": True}})
    config.to_toml(tmp_path / "t.toml")
    assert "[cudnn]\nbenchmark = true" in (tmp_path / "t.toml").read_text()
    assert BoostConfig.from_toml(tmp_path / "t.toml").cudnn.benchmark is True
    assert BoostConfig.off().cudnn.benchmark == "keep" and BoostConfig().cudnn.benchmark == "auto"


def test_auto_turns_it_on_only_on_cuda_with_convolutions_and_fixed_shapes():
    cuda = torch.device("cuda")
    on, why = resolve_benchmark("auto", CONV, _loader(64, 16), device=cuda)
    assert on is True and "fixed input shapes" in why
    # each condition that fails leaves torch's setting alone, and says why
    for model, loader, device, words in [
        (CONV, _loader(64, 16), torch.device("cpu"), "cuDNN is not used"),
        (MLP, _loader(64, 16), cuda, "no convolution"),
        (CONV, _loader(60, 16), cuda, "last batch is shorter (12 of 16)"),
        (CONV, None, cuda, "no DataLoader"),
    ]:
        value, why = resolve_benchmark("auto", model, loader, device=device)
        assert value == "keep" and words in why
    assert resolve_benchmark("auto", CONV, _loader(60, 16, drop_last=True), device=cuda)[0] is True


def test_fixed_shapes_sees_samples_of_different_shapes():
    class Ragged(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.zeros(3, 8 + i, 8)

    assert fixed_shapes(DataLoader(Ragged(), batch_size=1)) == (False, "samples differ in shape")
    assert fixed_shapes(_loader(32, 8))[0] is True


def test_explicit_values_are_honoured_and_off_leaves_the_flag_alone(benchmark_flag):
    torch.backends.cudnn.benchmark = True  # the script's own choice
    booster = torchboost.Booster(BoostConfig.off(), device="cpu", verbose=False)
    booster.prepare(nn.Linear(2, 2), torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1))
    assert torch.backends.cudnn.benchmark is True
    assert booster.resolved.config.cudnn.benchmark == "keep"
    booster = torchboost.Booster(BoostConfig.off().replace(cudnn={"benchmark": False}), device="cpu", verbose=False)
    model = nn.Linear(2, 2)
    booster.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert torch.backends.cudnn.benchmark is False  # the twin: an explicit false does reach torch
    assert "no effect off CUDA" in booster.resolved.reasons["cudnn.benchmark"]


def test_auto_on_cpu_is_inert(benchmark_flag):
    torch.backends.cudnn.benchmark = False
    booster = torchboost.Booster(BoostConfig(), device="cpu", verbose=False)
    booster.prepare(CONV, None, _loader(64, 16))
    assert torch.backends.cudnn.benchmark is False
    assert "cuDNN is not used" in booster.resolved.reasons["cudnn.benchmark"]


def test_applied_from_outside_to_an_unmodified_script(benchmark_flag):
    torch.backends.cudnn.benchmark = False
    settings, notes = nocode_settings(Overlay.of(CudnnConfig, benchmark=True))
    assert notes == [] and dict(settings) == {"cudnn.benchmark": True}
    applier = Applier(Plan.applying(settings)).install()
    try:
        assert torch.backends.cudnn.benchmark is True
        assert applier.notes == ["cudnn.benchmark set to True"]
    finally:
        applier.uninstall()


def test_tuner_candidate_on_cuda_only():
    lever = next(lv for lv in default_levers() if lv.id == "cudnn")
    convs, no_convs = (MemoryTuning(has_conv2d=True),), (MemoryTuning(has_conv2d=False),)
    assert lever.propose({}, TuneContext(device="cpu", tuning=convs)) == []
    assert lever.propose({}, TuneContext(device="cuda", tuning=no_convs)) == []
    assert lever.propose({}, TuneContext(device="cuda", tuning=convs)) == [Overlay.of(CudnnConfig, benchmark=True)]
    assert "cudnn.benchmark" in lever.finding_ids
