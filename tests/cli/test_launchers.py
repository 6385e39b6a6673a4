"""Any launcher: the doctor finds the training process wherever the command starts it.

Each form runs through the ``torchboost`` console script on a tiny script written here:
a bash wrapper that does not ``exec``, an executable shell script, ``accelerate launch``,
and a script that spawns two gloo ranks with ``torch.multiprocessing`` (torchrun has its
own tests in ``test_torchrun.py``). Each asserts the steps observed, the processes or
ranks the report names, and that the exit status is the command's own; each has a twin
whose command trains nowhere, or cannot run, and must say so.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torchboost.process.launch import UsageError, parse_launch

TRAIN = """\
import sys, torch
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 16), torch.randn(32, 1)
try:
    for step in range(200):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
finally:
    print("train.py finally", flush=True)
"""

SPAWN = """\
import os, torch, torch.distributed as dist, torch.multiprocessing as mp

def work(rank, world, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    for step in range(200):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    dist.destroy_process_group()

if __name__ == "__main__":
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(work, args=(2, port), nprocs=2)
    print("spawn.py done", flush=True)
"""


def _folder(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "infer.py").write_text("import torch\nprint('inference only', torch.ones(2).sum().item())\n")
    (tmp_path / "spawn.py").write_text(SPAWN)
    (tmp_path / "wrapper.sh").write_text("echo wrapper starts\npython train.py\necho wrapper ends\nexit 3\n")
    (tmp_path / "infer.sh").write_text("python infer.py\n")
    run = tmp_path / "run.sh"
    run.write_text('#!/bin/bash\npython train.py "$@"\n')
    run.chmod(0o755)
    return tmp_path


def _doctor(folder: Path, *command: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    exe = shutil.which("torchboost") or pytest.skip("the torchboost console script is not installed")
    proc = subprocess.run([exe, "doctor", "--steps", "4", "--warmup", "1", "--out", "doc", "--json", "--", *command],
                          capture_output=True, text=True, cwd=folder, timeout=300)
    report = folder / "doc" / "report.json"
    return proc, json.loads(report.read_text()) if report.is_file() else None


@pytest.mark.slow
def test_a_bash_wrapper_without_exec_is_observed_and_its_exit_status_kept(tmp_path):
    proc, report = _doctor(_folder(tmp_path), "bash", "wrapper.sh")
    assert proc.returncode == 3, proc.stderr[-2000:]  # the wrapper's own "exit 3"
    assert report["steps_observed"] == 4 and report["ended"] == "stopped"
    assert "wrapper ends" in proc.stderr and "train.py finally" in proc.stderr  # stopped at a step, then went on
    assert report["ranks"] == [] and report["processes"] == [report["facts"]["process"]]
    assert "python train.py" in report["processes"][0]


@pytest.mark.slow
def test_twin_a_wrapper_whose_python_never_trains_names_the_processes_that_ran(tmp_path):
    proc, report = _doctor(_folder(tmp_path), "bash", "infer.sh")
    assert proc.returncode == 0 and report is None  # the command's own status; nothing to report
    assert "no process of the command called optimizer.step()" in proc.stderr
    assert "python infer.py" in proc.stderr


@pytest.mark.slow
def test_an_executable_shell_script_is_run_as_itself(tmp_path):
    proc, report = _doctor(_folder(tmp_path), "./run.sh")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert report["steps_observed"] == 4


def test_twin_a_shell_script_that_is_not_executable_is_refused_with_what_to_type(tmp_path):
    script = tmp_path / "plain.sh"
    script.write_text("python train.py\n")
    with pytest.raises(UsageError, match=f"bash {script}"):
        parse_launch([str(script)])
    with pytest.raises(UsageError, match="command not found: no-such-launcher"):
        parse_launch(["no-such-launcher", "train.py"])


def test_a_tree_command_runs_as_typed_and_names_its_script_for_the_journal(tmp_path):
    (tmp_path / "train.py").write_text("")
    launch = parse_launch(["bash", "-c", "python train.py", str(tmp_path / "train.py")])
    assert launch.tree is not None and launch.tree[1:] == ("-c", "python train.py", str(tmp_path / "train.py"))
    assert launch.script == tmp_path / "train.py"
    assert launch.argv("torchboost.observe.child.bootstrap", "spec.json") == list(launch.tree)
    assert parse_launch(["python", str(tmp_path / "train.py")]).tree is None  # Python itself: the bootstrap


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="accelerate is not installed")
def test_accelerate_launch_is_observed_in_the_worker_it_starts(tmp_path):
    proc, report = _doctor(_folder(tmp_path), "accelerate", "launch", "--cpu", "--num_processes", "1", "train.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert report["steps_observed"] == 4 and report["ended"] == "stopped"


@pytest.mark.slow
def test_ranks_spawned_with_torch_multiprocessing_are_each_observed(tmp_path):
    proc, report = _doctor(_folder(tmp_path), sys.executable, "spawn.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "spawn.py done" in proc.stderr  # both ranks left with status 0: mp.spawn returned
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert report["job"]["world_size"] == 2 and report["steps_observed"] == 4


@pytest.mark.slow
def test_a_command_that_goes_on_after_its_training_has_ended_is_ended_as_a_stop(tmp_path):
    folder = _folder(tmp_path)
    (folder / "long.sh").write_text("python train.py\necho evaluating\nsleep 120\necho never printed\n")
    proc, report = _doctor(folder, "bash", "long.sh")
    assert proc.returncode == 0, proc.stderr[-2000:]  # stopped by torchboost after its steps, as python train.py
    assert "went on after its training had ended, and was ended" in proc.stderr and "sleep 120" in proc.stderr
    assert "evaluating" in proc.stderr and "never printed" not in proc.stderr
    assert report["steps_observed"] == 4


@pytest.mark.slow
def test_run_applies_the_configuration_in_the_python_process_a_wrapper_starts(tmp_path):
    folder = _folder(tmp_path)
    (folder / "threads.py").write_text(TRAIN + "print('threads', torch.get_num_threads())\n")
    (folder / "threads.sh").write_text("python threads.py\n")
    (folder / "torchboost.toml").write_text("[cpu]\nthreads = 1\n")
    exe = shutil.which("torchboost") or pytest.skip("the torchboost console script is not installed")
    proc = subprocess.run([exe, "run", "--", "bash", "threads.sh"], capture_output=True, text=True, cwd=folder,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "threads 1" in proc.stdout  # the process bash started runs with the configuration's threads
    assert "applied in pid" in proc.stderr and "intra-op threads set to 1" in proc.stderr
    if torch.get_num_threads() > 1:  # twin: without torchboost run, the machine's own count
        plain = subprocess.run(["bash", "threads.sh"], capture_output=True, text=True, cwd=folder, timeout=300)
        assert "threads 1" not in plain.stdout


SLOW = """\
import sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1)), batch_size=8, num_workers=2,
                  persistent_workers=True)
try:
    for epoch in range(100):
        for step, (x, y) in enumerate(data):
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if epoch == 0 and step == 3:
                print("stepping", flush=True)
            time.sleep(0.05)
finally:
    print("slow.py finally", flush=True)
"""


@pytest.mark.slow
def test_sigterm_to_the_doctor_ends_a_wrappers_whole_tree_through_its_finally(tmp_path):
    import psutil

    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "slow.sh").write_text("python slow.py\n")
    exe = shutil.which("torchboost") or pytest.skip("the torchboost console script is not installed")
    proc = subprocess.Popen([exe, "doctor", "--full", "--", "bash", "slow.sh"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    for line in proc.stdout:  # the script's own output passes through: wait until it steps
        lines.append(line)
        if "stepping" in line:
            break
    tree = psutil.Process(proc.pid).children(recursive=True)
    proc.terminate()
    out = "".join(lines) + proc.stdout.read()
    assert proc.wait(timeout=120) == 143
    assert "slow.py finally" in out  # the wrapper died at once; the python it started had its grace
    assert "stopped by SIGTERM" in out and "detached" not in out
    gone, alive = psutil.wait_procs(tree, timeout=5)
    assert alive == [] and len(tree) >= 4  # bash, python and its two loader workers
