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


@pytest.mark.slow
def test_threads_the_script_sets_itself_did_not_hold(script, capfd):
    assert _applied(capfd, "own-threads") == (
        "torchboost run: applied, as at the first optimizer step: the script sets 1 thread itself "
        "(torchboost's 2 did not hold); DataLoader num_workers=2")


@pytest.mark.slow
def test_the_twin_a_script_that_leaves_them_is_not_said_to_override(script, capfd):
    line = _applied(capfd)
    assert line == "torchboost run: applied, as at the first optimizer step: intra-op threads set to 2; " \
                   "DataLoader num_workers=2"
    assert "did not hold" not in line



THREE_MODULES = """
import sys
import torch


class Combined(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1, self.enc2, self.head = torch.nn.Linear(4, 8), torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.enc1(x) + self.enc2(x))


model = Combined()
enc1, enc2, head = model.enc1, model.enc2, model.head
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    x = torch.randn(2, 4)
    # Three modules combined in the script's body; the twin: the same maths inside one model.
    out = model(x) if "one-model" in sys.argv else head(enc1(x) + enc2(x))
    out.pow(2).mean().backward()
    optimizer.step()
"""


@pytest.mark.slow
@pytest.mark.parametrize("one_model", [False, True])
def test_bf16_from_outside_says_which_modules_it_covers(tmp_path, monkeypatch, capfd, one_model):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    (tmp_path / "train.py").write_text(THREE_MODULES)
    BoostConfig.off().replace(precision={"mode": "bf16"}).to_toml(tmp_path / "torchboost.toml")
    line = _applied(capfd, *(["one-model"] if one_model else []))
    if one_model:
        assert line == "torchboost run: applied, as at the first optimizer step: bf16 autocast around Combined.forward"
    else:
        assert line == ("torchboost run: applied, as at the first optimizer step: bf16 autocast around "
                        "Linear.forward (covers enc1, 1 of the 3 modules the loop trains; enc2 and head run "
                        "outside it)")
