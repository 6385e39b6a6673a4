"""The one DataLoader patch: what it wraps, and that uninstall puts PyTorch back exactly."""

from __future__ import annotations

import pytest
import torch
import torch.utils.data.dataloader as dl
from torch.utils.data import DataLoader, TensorDataset

from torchboost.reach.loader_patch import (
    INIT_ATTRIBUTES, ITERATION_ATTRIBUTES, LoaderPatch, rewritten_arguments, timed_iteration,
)

_ALL = (*INIT_ATTRIBUTES, *ITERATION_ATTRIBUTES)


def _own() -> dict[str, object]:
    """What each patched class holds in its own ``__dict__`` now."""
    return {f"{owner.__name__}.{name}": owner.__dict__.get(name) for owner, name in _ALL}


def assert_originals(before: dict[str, object]) -> None:
    after = _own()
    for key, value in before.items():
        assert after[key] is value, f"{key} is not the original"


class _Observer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def loader_iter(self, loader, iterator):
        self.calls.append("iter")

    def data_begin(self):
        self.calls.append("begin")

    def loader_batch(self, iterator, ms):
        self.calls.append("batch")


def _data():
    return TensorDataset(torch.randn(8, 2))


def test_both_patches_work_and_uninstall_restores_the_original_functions():
    before = _own()
    assert all(callable(v) for v in before.values())
    observer = _Observer()
    timing = timed_iteration(observer).install()
    arguments = rewritten_arguments([lambda args: args.update(batch_size=4)]).install()
    try:
        loader = DataLoader(_data(), batch_size=2)
        assert loader.batch_size == 4  # rewritten
        assert len(list(loader)) == 2
        assert observer.calls[:3] == ["iter", "begin", "batch"]
        assert all(_own()[k] is not v for k, v in before.items())  # every attribute was replaced
    finally:
        arguments.uninstall()
        timing.uninstall()
    assert_originals(before)
    assert DataLoader.__init__ is before["DataLoader.__init__"]
    assert dl._BaseDataLoaderIter.__next__ is before["_BaseDataLoaderIter.__next__"]
    timing.uninstall()  # twice is harmless
    assert_originals(before)


def test_the_restore_check_fails_while_a_patch_is_installed():
    # The broken twin: without uninstall the check above must fail.
    before = _own()
    patch = timed_iteration(_Observer()).install()
    try:
        with pytest.raises(AssertionError):
            assert_originals(before)
    finally:
        patch.uninstall()
    assert_originals(before)


def test_an_inherited_attribute_is_removed_again_not_copied_down():
    class Base:
        def hello(self):
            return "base"

    class Child(Base):
        pass

    patch = LoaderPatch({(Child, "hello"): lambda original: lambda self: "patched " + original(self)}).install()
    assert Child().hello() == "patched base"
    patch.uninstall()
    assert "hello" not in Child.__dict__ and Child().hello() == "base"


def test_installing_one_patch_twice_is_refused():
    patch = timed_iteration(_Observer()).install()
    try:
        with pytest.raises(RuntimeError, match="already installed"):
            patch.install()
    finally:
        patch.uninstall()
