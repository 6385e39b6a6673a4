"""The epochs written into the script's own loop: ``for epoch in range(3): for x, y in tqdm(loader)``."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchboost.evidence.observed import LoaderFacts
from torchboost.observe.probes.loop_epochs import loop_epochs
from torchboost.observe.probes.stated_length import Stated, stated_on_stack
from torchboost.observe.record.facts_builder import planned_run

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"

# The helpers stand for a script's functions: no assert in them (pytest's rewritten asserts
# call locals(), and a function that may hold its locals() dict is not read).


class _Bar:
    """A progress bar of tqdm's shape: it wraps an iterable and yields its items."""

    def __init__(self, iterable, desc: str = "") -> None:
        self.iterable = iterable

    def __iter__(self):
        yield from self.iterable


def _loader() -> DataLoader:
    return DataLoader(TensorDataset(torch.zeros(8, 1)), batch_size=4)


def _epochs_around_a_bar(loader: DataLoader) -> Stated:
    for epoch in range(3):
        for (x,) in _Bar(loader, desc=f"epoch {epoch}"):
            return stated_on_stack()
    return Stated()


def _one_epoch_in_a_bar(loader: DataLoader) -> Stated:
    for (x,) in _Bar(loader):
        return stated_on_stack()
    return Stated()


def test_the_range_around_a_loop_over_a_wrapped_loader_gives_the_epochs():
    assert _epochs_around_a_bar(_loader()) == Stated(epochs=("loop for epoch in range(3)", 3))
    loader = LoaderFacts(num_batches=16)
    assert planned_run(loader, None, ["python", "train.py"], None, _epochs_around_a_bar(_loader())) == (
        48, "the script's loop for epoch in range(3) x 16 batches per epoch")


def test_twin_a_loop_over_the_loader_alone_is_one_epoch():
    assert _one_epoch_in_a_bar(_loader()) == Stated()
    assert planned_run(LoaderFacts(num_batches=16), None, ["python", "train.py"], None,
                       _one_epoch_in_a_bar(_loader())) == (16, "one epoch of the script's DataLoader")


def _epochs_in_the_caller(loader: DataLoader, first: int, last: int) -> Stated:
    found = Stated()
    for epoch in range(first, last + 1):
        found = _one_epoch_in_a_bar(loader)  # the caller's loop runs around the callee's
    return found


def test_an_epoch_loop_in_the_caller_counts_with_its_bounds_read_from_its_scope():
    assert _epochs_in_the_caller(_loader(), 1, 4) == Stated(epochs=("loop for epoch in range(first, last + 1) = 4", 4))


def _steps_over_an_iterator(loader: DataLoader) -> tuple[str, int] | None:
    batches = iter(loader)
    for step in range(100):
        next(batches)
        return loop_epochs()
    return None


def _range_of_a_call(loader: DataLoader) -> tuple[str, int] | None:
    for epoch in range(len(loader)):  # a call: the script's code would run to read it
        for (x,) in loader:
            return loop_epochs()
    return None


class _Plan:
    @property
    def epochs(self) -> int:
        return 5


def _range_of_a_property(loader: DataLoader, plan: _Plan) -> tuple[str, int] | None:
    for epoch in range(plan.epochs):  # a property runs code: not read
        for (x,) in loader:
            return loop_epochs()
    return None


def _range_of_a_namespace(loader: DataLoader, args: argparse.Namespace) -> tuple[str, int] | None:
    for epoch in range(args.epochs * 2):  # twin of the two above: a plain field is read
        for (x,) in loader:
            return loop_epochs()
    return None


def test_no_epochs_from_a_step_loop_or_bounds_that_would_run_code():
    assert _steps_over_an_iterator(_loader()) is None  # a loop over steps, none over the loader
    assert _range_of_a_call(_loader()) is None
    assert _range_of_a_property(_loader(), _Plan()) is None
    assert _range_of_a_namespace(_loader(), argparse.Namespace(epochs=3)) == ("loop for epoch in range(args.epochs * 2) = 6", 6)


def _agrees_with_its_setting(loader: DataLoader, args: argparse.Namespace) -> Stated:
    for epoch in range(1, args.epochs + 1):
        for (x,) in loader:
            return stated_on_stack()
    return Stated()


def _differs_from_a_setting(loader: DataLoader) -> Stated:
    epochs = 14  # noqa: F841 - a setting the loop does not use
    for epoch in range(2):
        for (x,) in loader:
            return stated_on_stack()
    return Stated()


def test_the_loop_wins_over_a_setting_it_does_not_use_and_agrees_in_the_setting_s_words():
    assert _agrees_with_its_setting(_loader(), argparse.Namespace(epochs=3)) == Stated(epochs=("args.epochs = 3", 3))
    assert _differs_from_a_setting(_loader()) == Stated(epochs=("loop for epoch in range(2)", 2))


@pytest.mark.slow
def test_the_doctor_reads_the_epochs_around_a_tqdm_loop(tmp_path):
    pytest.importorskip("tqdm")
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "torchboost.cli", "doctor", "--steps", "5", "--warmup", "2",
                           "--out", str(out), "--", "python", str(SCRIPTS / "progress_epochs.py")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads((out / "facts.json").read_text())
    # 3 epochs of 16 batches: one epoch (16) before the loop was read
    assert (facts["planned_steps"], facts["planned_from"]) == (
        48, "the script's loop for epoch in range(3) x 16 batches per epoch")
