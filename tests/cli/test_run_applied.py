"""`torchboost run`'s "applied" line: every setting, as it held at the script's first step."""

from __future__ import annotations

import sys

import pytest
import torch

from torchboost import cli
from torchboost.config import BoostConfig

SCRIPT = """
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset

if "own-threads" in sys.argv:
    torch.set_num_threads(1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = loader.dataset.tensors  # the loader is built, not iterated: no worker starts
torch.nn.functional.mse_loss(model(x), y).backward()
optimizer.step()
"""


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script runs here: run sets sys.path[0]
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    threads = torch.get_num_threads()
    (tmp_path / "train.py").write_text(SCRIPT)
    BoostConfig.off().replace(cpu={"threads": 2}, loader={"num_workers": 2}).to_toml(tmp_path / "torchboost.toml")
    yield
    torch.set_num_threads(threads)


def _applied(capfd, *args: str) -> str:
    assert cli.main(["run", "--", "python", "train.py", *args]) == 0
    return next(line for line in capfd.readouterr().err.splitlines() if line.startswith("torchboost run: applied"))


def test_threads_the_script_sets_itself_did_not_hold(script, capfd):
    assert _applied(capfd, "own-threads") == (
        "torchboost run: applied, as at the first optimizer step: the script sets 1 thread itself "
        "(torchboost's 2 did not hold); DataLoader num_workers=2")


def test_the_twin_a_script_that_leaves_them_is_not_said_to_override(script, capfd):
    line = _applied(capfd)
    assert line == "torchboost run: applied, as at the first optimizer step: intra-op threads set to 2; " \
                   "DataLoader num_workers=2"
    assert "did not hold" not in line
