"""torchboost compare: two commands, or two configurations on one, end to end with a verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from torchboost.cli.compare import sides
from torchboost.process.launch import UsageError
from torchboost.tune.verify.versus import Comparison, Side, loss_verdict
from torchboost.tune.verify.end_to_end import EndToEnd

LOSSES = [2.0 - 0.02 * i for i in range(30)]
SCRIPT = """import time, torch
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for _ in range(40):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    time.sleep({pause})
"""


def test_two_commands_or_one_command_and_two_configs(tmp_path):
    a, b = sides(["python", "a.py", "--", "python", "b.py", "--lr", "1"], [])
    assert (a.command, b.command) == (["python", "a.py"], ["python", "b.py", "--lr", "1"]) and a.config is None
    toml = tmp_path / "b.toml"
    toml.write_text("[cpu]\nthreads = 1\n")
    a, b = sides(["python", "train.py"], ["none", str(toml)])
    assert a.config is None and b.config == toml and a.command == b.command == ["python", "train.py"]


@pytest.mark.parametrize("command, configs, said", [
    (["python", "a.py"], [], "give two commands"),
    (["python", "a.py", "--"], [], "a side has no command"),
    (["python", "t.py"], ["a.toml"], "give it twice"),
    (["python", "t.py"], ["none", "missing.toml"], "no such file"),
    (["python", "a.py", "--", "python", "b.py"], ["none", "none"], "give one command"),
])
def test_twin_sides_that_do_not_make_two_are_a_usage_error(command, configs, said):
    with pytest.raises(UsageError, match=said):
        sides(command, configs)


@pytest.mark.parametrize("other, words", [
    (LOSSES, "the same losses"),
    ([x * 1.01 for x in LOSSES], "reduced precision"),
    ([x * 0.95 for x in LOSSES], "the same loss trend"),
    ([2.0 + 0.05 * i for i in range(30)], "differ beyond every tolerance"),
])
def test_the_losses_are_judged_strictest_tolerance_first(other, words):
    ok, said = loss_verdict(LOSSES, other)
    assert words in said and ok is ("differ" not in words)


@pytest.mark.parametrize("b_runs, verdict", [([8.0, 8.1, 7.9, 8.0], "B is faster: 1.25x"),
                                             ([12.5, 12.4, 12.6, 12.5], "A is faster: 1.25x"),
                                             ([9.9, 10.2, 9.8, 10.1], "no proven win")])
def test_the_verdict_says_which_side_won_or_that_none_did(b_runs, verdict):
    runs = EndToEnd(baseline_runs_s=[10.0, 10.1, 9.9, 10.0], tuned_runs_s=b_runs)
    assert Comparison(Side("A", ["x"]), Side("B", ["y"]), runs).verdict(0.03).startswith(verdict)


@pytest.mark.slow
def test_compare_two_tiny_commands_end_to_end(tmp_path):
    (tmp_path / "slow.py").write_text(SCRIPT.format(pause=0.05))
    (tmp_path / "fast.py").write_text(SCRIPT.format(pause=0.0))
    done = subprocess.run([sys.executable, "-m", "torchboost.cli", "compare", "--pairs", "2", "--loss-steps", "10",
                           "--json", "--", "python", "slow.py", "--", "python", "fast.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["verdict"].startswith("B is faster") and result["end_to_end"]["pairs"] >= 2
    assert result["parity_ok"] and "the same losses" in result["parity"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".py") == ["fast.py", "slow.py"]
