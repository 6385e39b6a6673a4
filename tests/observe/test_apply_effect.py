"""What held of every setting at the first optimizer step, read back from live state."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from torchboost.nocode import Applier
from torchboost.plan import Plan


@pytest.fixture(autouse=True)
def _threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


class _Stream(IterableDataset):
    def __iter__(self):
        yield from range(4)


def _step() -> None:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()


def _effect(settings, script) -> Applier:
    applier = Applier(Plan.applying(settings)).install()
    try:
        script()
    finally:
        applier.uninstall()
    return applier


def test_threads_the_script_sets_itself_are_reported_as_not_held():
    def script():
        torch.set_num_threads(1)  # the script's own, after torchboost's at install
        _step()

    applier = _effect({"cpu.threads": 2}, script)
    assert applier.effect == ["the script sets 1 thread itself (torchboost's 2 did not hold)"]
    assert applier.effect_at == "the first optimizer step"


def test_the_twin_threads_left_alone_are_reported_as_set():
    applier = _effect({"cpu.threads": 2}, _step)
    assert applier.effect == ["intra-op threads set to 2"]


def test_what_held_is_read_at_the_first_step_not_later():
    def script():
        _step()
        torch.set_num_threads(1)  # after the first step: the step ran with torchboost's 2

    assert _effect({"cpu.threads": 2}, script).effect == ["intra-op threads set to 2"]


def test_every_loader_setting_is_read_from_the_loaders_built():
    def script():
        loaders = [DataLoader(TensorDataset(torch.zeros(4, 2)), batch_size=2),  # alive at the step, as a
                   DataLoader(TensorDataset(torch.zeros(4, 2)), batch_size=2),  # script's loaders are
                   DataLoader(_Stream(), batch_size=2)]  # an unsharded stream keeps its one process
        _step()
        return loaders

    applier = _effect({"cpu.threads": 1, "loader.num_workers": 2, "loader.persistent_workers": True}, script)
    assert applier.effect == ["intra-op threads set to 1",
                              "2 x DataLoader num_workers=2, persistent_workers=True",
                              "DataLoader num_workers=0 (torchboost's 2 did not hold)"]


def test_without_a_step_what_held_is_read_at_the_end():
    applier = _effect({"loader.num_workers": 2}, lambda: None)
    assert applier.effect == ["no DataLoader built by then (num_workers=2 unused)"]
    assert applier.effect_at == "the script's end"


def test_a_setting_with_nothing_to_apply_to_is_still_named():
    applier = _effect({"compile.mode": "default"}, lambda: None)
    assert applier.effect == ["compile mode=default: not applied, nothing to apply it to by then"]


def test_reading_what_held_leaves_torchs_step_hooks_as_they_are_mid_step():
    """The read at the first step happens inside torch's loop over the step's pre-hooks;
    another global hook there (the doctor's observer) must still see a working step."""
    import torch
    import torch.optim.optimizer as optim_module

    from torchboost.config import Overlay
    from torchboost.nocode import Applier
    from torchboost.plan import Plan

    seen: list[int] = []
    applier = Applier(Plan.applying(Overlay({"cpu.threads": torch.get_num_threads()}))).install()
    # After the applier's, as the observer's are installed after it: torch's loop goes on past it.
    other = optim_module.register_optimizer_step_pre_hook(lambda opt, args, kwargs: seen.append(1))
    try:
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            optimizer.step()
    finally:
        applier.uninstall()
        other.remove()
    assert applier.effect is not None and applier.effect_at == "the first optimizer step"
    assert len(seen) == 2
