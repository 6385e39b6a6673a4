"""Platforms: on a system without POSIX process groups (Windows) the commands that run a
script say so in one line and exit 2, while the Booster imports and trains."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from torchboost.cli import main, platform_refusal

WITHOUT_POSIX = r'''
import json, os, signal, sys
import psutil, torch  # imported as they are on Windows, before what Windows lacks is taken away
for name in ("fcntl", "resource", "termios", "pty", "grp", "pwd"):
    sys.modules[name] = None  # absent on Windows: importing one raises ImportError
for name in ("SIGHUP", "SIGCHLD", "SIGKILL", "SIGALRM", "SIGQUIT", "SIGUSR1", "SIGUSR2"):
    if hasattr(signal, name):
        delattr(signal, name)
for name in ("killpg", "setsid", "getpgid", "fork"):
    if hasattr(os, name):
        delattr(os, name)
said = {}
if sys.argv[1] == "twin":
    try:
        import torchboost.cli._lock  # what tune's lock imports: the simulation takes it away
        said["lock"] = "imported"
    except ImportError as exc:
        said["lock"] = f"ImportError: {exc}"
    print(json.dumps(said))
    sys.exit(0)
import torchboost
from torchboost.cli import main
said["codes"] = {name: main([name, "--", "python", "train.py"]) for name in ("doctor", "tune", "run", "compare")}
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1)),
                                     batch_size=4)
booster = torchboost.Booster(verbose=False)
model, optimizer, loader = booster.prepare(model, optimizer, loader)
losses = []
for x, y in loader:
    with booster.autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    booster.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    losses.append(float(loss))
said["steps"] = len(losses)
print(json.dumps(said))
'''


def _without_posix(tmp_path, *args: str) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-c", WITHOUT_POSIX, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.slow
def test_without_posix_the_commands_refuse_in_one_line_and_the_booster_trains(tmp_path):
    said, err = _without_posix(tmp_path, "check")
    assert said["codes"] == {"doctor": 2, "tune": 2, "run": 2, "compare": 2}
    lines = [line for line in err.splitlines() if "needs POSIX process groups" in line]
    assert len(lines) == 4 and all(line.startswith("torchboost ") and "torchboost.Booster" in line for line in lines)
    assert "Traceback" not in err
    assert said["steps"] == 4


@pytest.mark.slow
def test_twin_the_simulation_takes_away_what_the_supervisor_imports(tmp_path):
    said, _ = _without_posix(tmp_path, "twin")
    assert said["lock"].startswith("ImportError")  # without the refusal, tune would crash on this import


def test_here_nothing_is_refused_and_export_never_is(monkeypatch, capsys):
    assert platform_refusal("doctor") is None  # this machine has process groups
    monkeypatch.setattr("torchboost.cli.posix_processes", lambda: False)
    assert "needs POSIX process groups" in platform_refusal("tune")
    assert platform_refusal("export") is None and platform_refusal("probe") is None
    assert main(["run", "--", "python", "train.py"]) == 2
    assert capsys.readouterr().err.count("\n") == 1  # one line
