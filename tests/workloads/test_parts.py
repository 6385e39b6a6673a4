"""The workloads' parts: registry, sizes, argument errors, datasets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torchboost.workloads import NAMES, REGISTRY, Workload
from torchboost.workloads import data, gpt, vision


def test_registry_lists_the_four_workloads_and_names_them_in_errors():
    assert list(REGISTRY) == ["gpt", "vision", "mlp", "data"] == list(NAMES)
    for name in NAMES:
        assert callable(REGISTRY[name].build) and callable(REGISTRY[name].main)
    with pytest.raises(KeyError, match="choose from gpt, vision, mlp, data"):
        REGISTRY["resnet"]


@pytest.mark.parametrize("name", NAMES)
def test_build_gives_a_complete_workload(name):
    w = REGISTRY[name].build("tiny", seed=0)
    assert isinstance(w, Workload) and w.name == name and w.description
    assert w.batch_size > 0 and len(w.dataset) >= w.batch_size
    x, y = w.dataset[0]
    out = w.model(x.unsqueeze(0))
    loss = w.loss_fn(out, y.unsqueeze(0))
    assert loss.ndim == 0 and torch.isfinite(loss)
    assert isinstance(w.make_optimizer(w.model.parameters()), torch.optim.Optimizer)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_size_and_bad_arguments_exit_2(name, capsys):
    with pytest.raises(SystemExit) as exc:
        REGISTRY[name].main(["--size", "huge"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        REGISTRY[name].main(["--steps", "many"])
    assert exc.value.code == 2


def test_gpt_tiny_is_about_100k_parameters_with_context_64():
    w = gpt.build("tiny")
    assert 80_000 <= w.parameter_count() <= 130_000
    assert w.dataset[0][0].shape == (64,)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_gpt2_size_refuses_a_cpu_only_machine_and_says_what_to_use(capsys):
    with pytest.raises(SystemExit) as exc:
        gpt.main(["--size", "gpt2"])
    assert exc.value.code == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_gpt2_shape_is_gpt2_small():
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        model = gpt.GPT(gpt.SHAPES["gpt2"])
    assert 123e6 < sum(p.numel() for p in model.parameters()) < 125e6


def test_gpt_targets_are_inputs_shifted_by_one_byte():
    ds = gpt.ByteWindows(b"abcdefghij", context=4)
    x, y = ds[2]
    assert bytes(x.tolist()) == b"cdef" and bytes(y.tolist()) == b"defg"
    assert len(ds) == 5
    with pytest.raises(ValueError, match="too short"):
        gpt.ByteWindows(b"abc", context=4)


def test_gpt_corpus_is_deterministic_text():
    text = gpt.corpus()
    assert len(text) > 50_000 and text == gpt.corpus.__wrapped__()
    assert b"argparse" in text


def test_vision_augmentation_is_drawn_per_sample_and_seed():
    ds = vision.AugmentedImages(16, 4, seed=0)
    x = ds[0][0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32
    # Same index, same draw: any number of loader workers gives the same batches.
    assert torch.equal(x, ds[0][0])
    # Another seed augments the same image differently.
    other = vision.AugmentedImages(16, 4, seed=1)
    assert not torch.equal(x, other[0][0])


def test_vision_batches_are_the_same_with_workers():
    from torch.utils.data import DataLoader

    ds = vision.AugmentedImages(16, 4, seed=0)
    plain = [b[0] for b in DataLoader(ds, batch_size=4)]
    workers = [b[0] for b in DataLoader(ds, batch_size=4, num_workers=2)]
    assert all(torch.equal(p, q) for p, q in zip(plain, workers))


def test_vision_hue_rotation_keeps_grey_grey():
    grey = np.full((1, 3), 0.4, dtype=np.float32)
    np.testing.assert_allclose(grey @ vision._hue_matrix(0.07), grey, atol=1e-5)
    colour = np.array([[0.9, 0.1, 0.2]], dtype=np.float32)
    assert not np.allclose(colour @ vision._hue_matrix(0.07), colour, atol=1e-3)


def test_data_cost_knob_scales_the_work_and_keeps_samples():
    assert data._units_for(0.0) == 0
    assert data._units_for(400.0) > data._units_for(50.0) >= 1
    cheap = data.build("tiny", sample_cost_us=0.0).dataset
    costly = data.build("tiny", sample_cost_us=50.0).dataset
    assert torch.equal(cheap[3][0], costly[3][0]) and cheap[3][1] == costly[3][1]
    with pytest.raises(SystemExit):
        data.main(["--sample-cost-us", "-1"])
